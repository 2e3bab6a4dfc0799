"""Issue 42: the launch decided per entry point from what it really runs, new rules (``info``) for
the classes the second corpus found, program models beside Horovod, and a fix each finding carries
as an edit. Every script is a small real file scanned through the real CLI or the scan API."""
import json
import textwrap
from pathlib import Path

from conftest import run_envtool
from envtool.checks import scan


def _write(root: Path, files: dict) -> None:
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))


def _doctor(path: Path) -> dict:
    r = run_envtool("doctor", "--only", "script", "--script", str(path), "--json")
    return json.loads(r.stdout)["findings"][0]["details"]


def _rules(issues) -> set:
    return {i.rule if hasattr(i, "rule") else i["rule"] for i in issues}


DDP_ENTRY = '''\
    import os
    import torch
    import torch.distributed as dist
    from helpers import util


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = torch.nn.Linear(2, 2).cuda()
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
        opt = torch.optim.SGD(model.parameters(), lr=util(0.1))
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "ckpt.pt")


    if __name__ == "__main__":
        main()
    '''


def test_helper_importing_horovod_does_not_make_a_torchrun_entry_horovod(tmp_path):
    _write(tmp_path, {"train.py": DDP_ENTRY, "helpers.py": '''\
        import horovod.torch as hvd


        def hvd_setup():
            hvd.init()


        def util(x):
            return x + 1
        '''})
    details = _doctor(tmp_path / "train.py")
    (prog,) = details["programs"]
    assert prog["launch"] == "torchrun", prog
    assert details["issues"] == []
    # the helper's Horovod code, once reached, decides the launch again
    (tmp_path / "train.py").write_text(textwrap.dedent(DDP_ENTRY).replace(
        "from helpers import util", "from helpers import util, hvd_setup").replace(
        '    dist.init_process_group("nccl")', '    hvd_setup()'))
    (prog,) = _doctor(tmp_path / "train.py")["programs"]
    assert prog["launch"] == "horovod" and "hvd.init" in prog["reason"], prog


def test_set_device_in_a_method_never_called_is_not_pinning(tmp_path):
    src = '''\
        import os
        import torch
        import torch.distributed as dist


        class Runner:
            def setup_gpu(self):
                torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


        def main():
            dist.init_process_group("nccl")
            r = Runner()
            model = torch.nn.Linear(2, 2).cuda()
            model = torch.nn.parallel.DistributedDataParallel(model)
            if dist.get_rank() == 0:
                torch.save(model.state_dict(), "ckpt.pt")


        if __name__ == "__main__":
            main()
        '''
    _write(tmp_path, {"train.py": src})
    issues = _doctor(tmp_path / "train.py")["issues"]
    assert [i["rule"] for i in issues] == ["no-gpu-pinning"], issues
    assert issues[0]["edit"] == {"path": str(tmp_path / "train.py"), "line": 12,
                                 "old": '    dist.init_process_group("nccl")',
                                 "new": '    dist.init_process_group("nccl")\n'
                                        "    torch.cuda.set_device(int(os.environ['LOCAL_RANK']))"}
    (tmp_path / "train.py").write_text(textwrap.dedent(src).replace("r = Runner()", "Runner().setup_gpu()"))
    assert _doctor(tmp_path / "train.py")["issues"] == []


def test_save_on_master_testing_the_torch_distributed_rank_under_horovod_writes_on_every_rank():
    src = textwrap.dedent('''\
        import torch
        import torch.distributed as dist
        import horovod.torch as hvd


        def save_on_master(obj, path):
            if dist.get_rank() == 0:
                torch.save(obj, path)


        def main():
            hvd.init()
            torch.cuda.set_device(hvd.local_rank())
            model = torch.nn.Linear(2, 2).cuda()
            opt = torch.optim.SGD(model.parameters(), lr=0.1 * hvd.size())
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            save_on_master(model.state_dict(), "ckpt.pt")


        if __name__ == "__main__":
            main()
        ''')
    issues = scan.scan_source(src, "train.py")
    assert [(i.rule, i.line) for i in issues] == [("checkpoint-all-ranks", 18)], issues
    # the same test under torch.distributed guards the write
    ddp = src.replace("hvd.init()", "dist.init_process_group('nccl'); hvd.init()")
    assert scan.scan_source(ddp, "train.py") == []
    # and a Horovod rank test guards it under Horovod
    assert scan.scan_source(src.replace("dist.get_rank() == 0", "hvd.rank() == 0"), "train.py") == []


DEFECTS = textwrap.dedent('''\
    import json
    import os
    import torch
    import torch.distributed as dist
    import torchvision
    from torch.utils.data import DataLoader, random_split
    from torch.utils.data.distributed import DistributedSampler


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        data = torchvision.datasets.CIFAR10("/shared/data", download=True)
        train, val = random_split(data, [45000, 5000])
        sampler = DistributedSampler(train)
        loader = DataLoader(train, batch_size=64, sampler=sampler)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda(), device_ids=[local_rank])
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(10):
            for x, y in loader:
                opt.step()
        json.dump({"loss": 0.0}, open("metrics.json", "w"))
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "ckpt.pt")


    if __name__ == "__main__":
        main()
    ''')
NEW_RULES = {"sampler-no-set-epoch", "unseeded-split", "log-all-ranks", "download-all-ranks"}


def test_new_rules_fire_at_their_held_out_level_with_a_fix_each(tmp_path):
    (tmp_path / "train.py").write_text(DEFECTS)
    issues = _doctor(tmp_path / "train.py")["issues"]
    got = {i["rule"]: i for i in issues}
    assert set(got) == NEW_RULES, issues
    # levels from the held-out precision (envtool/checks/scan/levels.py)
    assert {i["rule"]: i["level"] for i in issues} == {"sampler-no-set-epoch": "warn", "unseeded-split": "warn",
                                                      "download-all-ranks": "warn", "log-all-ranks": "info"}
    assert (got["download-all-ranks"]["line"], got["unseeded-split"]["line"],
            got["sampler-no-set-epoch"]["line"]) == (14, 15, 16)
    lines = DEFECTS.splitlines()
    assert got["sampler-no-set-epoch"]["edit"] == {
        "path": str(tmp_path / "train.py"), "line": 20, "old": lines[19],
        "new": lines[19] + "\n        sampler.set_epoch(epoch)"}
    assert got["unseeded-split"]["edit"]["new"] == \
        "    train, val = random_split(data, [45000, 5000], generator=torch.Generator().manual_seed(0))"
    assert got["log-all-ranks"]["line"] == 23 and "dist.get_rank() == 0" in got["log-all-ranks"]["fix"]
    assert "dist.barrier()" in got["download-all-ranks"]["fix"]


def test_new_rules_quiet_once_fixed():
    fixed = DEFECTS.replace(
        '    data = torchvision.datasets.CIFAR10("/shared/data", download=True)\n',
        '    if dist.get_rank() == 0:\n'
        '        torchvision.datasets.CIFAR10("/shared/data", download=True)\n'
        '    dist.barrier()\n'
        '    data = torchvision.datasets.CIFAR10("/shared/data", download=False)\n').replace(
        "[45000, 5000])", "[45000, 5000], generator=torch.Generator().manual_seed(0))").replace(
        "    for epoch in range(10):\n", "    for epoch in range(10):\n        sampler.set_epoch(epoch)\n").replace(
        'json.dump({"loss": 0.0}, open("metrics.json", "w"))',
        'json.dump({"loss": 0.0}, open(f"metrics{dist.get_rank()}.json", "w"))')
    assert scan.scan_source(fixed, "train.py") == []
    # a common seed makes random_split agree on every rank; a seed built from the rank does not
    seeded = DEFECTS.replace("    data = ", "    torch.manual_seed(0)\n    data = ")
    assert "unseeded-split" not in _rules(scan.scan_source(seeded, "train.py"))
    per_rank = DEFECTS.replace("    data = ", "    torch.manual_seed(dist.get_rank())\n    data = ")
    assert "unseeded-split" in _rules(scan.scan_source(per_rank, "train.py"))


def test_output_named_by_the_local_rank_collides_across_nodes():
    src = DEFECTS.replace('open("metrics.json", "w")', 'open(f"metrics{local_rank}.json", "w")')
    assert "log-all-ranks" not in _rules(scan.scan_source(src, "train.py"))  # one node: no collision
    src = src.replace("    local_rank = ", "    nodes = int(os.environ['SLURM_NNODES'])\n    local_rank = ")
    (issue,) = [i for i in scan.scan_source(src, "train.py") if i.rule == "log-all-ranks"]
    assert "local rank" in issue.message and issue.level == "info"


PARTITIONED = textwrap.dedent('''\
    import random
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader


    class Partition:
        def __init__(self, data, index):
            self.data, self.index = data, index

        def __len__(self):
            return len(self.index)

        def __getitem__(self, i):
            return self.data[self.index[i]]


    class DataPartitioner:
        def __init__(self, data, sizes, seed=1234):
            self.data = data
            indexes = list(range(len(data)))
            random.Random(seed).shuffle(indexes)
            self.partitions = []
            for frac in sizes:
                n = int(frac * len(data))
                self.partitions.append(indexes[:n])
                indexes = indexes[n:]

        def use(self, part):
            return Partition(self.data, self.partitions[part])


    def main():
        dist.init_process_group("gloo")
        size = dist.get_world_size()
        data = list(range(1000))
        partition = DataPartitioner(data, [1.0 / size] * size).use(dist.get_rank())
        loader = DataLoader(partition, batch_size=32, shuffle=True)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            for x in loader:
                opt.step()
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "ckpt.pt")


    if __name__ == "__main__":
        main()
    ''')


def test_custom_per_rank_partitioner_counts_as_sharding():
    assert scan.scan_source(PARTITIONED, "train.py") == []
    whole = PARTITIONED.replace(".use(dist.get_rank())", ".use(0)")
    assert "data-not-sharded" in _rules(scan.scan_source(whole, "train.py"))
    chunked = PARTITIONED.replace("DataPartitioner(data, [1.0 / size] * size).use(dist.get_rank())",
                                  "torch.tensor_split(torch.arange(1000), size)[dist.get_rank()]")
    assert scan.scan_source(chunked, "train.py") == []


DEEPSPEED = textwrap.dedent('''\
    import torch
    import deepspeed
    from torch.utils.data import DataLoader


    def main():
        model = torch.nn.Linear(2, 2)
        engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                 config="ds_config.json")
        loader = DataLoader(list(range(100)), batch_size=8)
        for epoch in range(3):
            for x in loader:
                engine.step()
            engine.save_checkpoint("ckpt", tag=f"epoch{epoch}")
        torch.save(engine.module.state_dict(), "final.pt")


    if __name__ == "__main__":
        main()
    ''')


def test_deepspeed_program_model():
    issues = scan.scan_source(DEEPSPEED, "train.py")
    # save_checkpoint is DeepSpeed's collective (every rank calls it); the plain torch.save is a write on
    # every rank, and the DataLoader reads everything on every rank
    assert [(i.rule, i.line) for i in issues] == [("data-not-sharded", 10), ("checkpoint-all-ranks", 15)], issues
    assert {i.launch for i in issues} == {"torchrun"}
    # handing the dataset to deepspeed.initialize shards it (training_data=)
    fixed = DEEPSPEED.replace('config="ds_config.json")', 'config="ds_config.json", training_data=data)').replace(
        "    loader = DataLoader(list(range(100)), batch_size=8)\n", "").replace(
        "    model = torch.nn.Linear(2, 2)\n", "    model = torch.nn.Linear(2, 2)\n    data = list(range(100))\n").replace(
        "engine, opt, _, _", "engine, opt, loader, _")
    assert "DataLoader(" not in fixed
    assert [i.rule for i in scan.scan_source(fixed, "train.py")] == ["checkpoint-all-ranks"]


KERAS_MWMS = textwrap.dedent('''\
    import json
    import tensorflow as tf


    def main():
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        (x, y), _ = tf.keras.datasets.mnist.load_data()
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
            model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
        history = model.fit(x, y, epochs=3, batch_size=64)
        with open("history.json", "w") as f:
            json.dump(history.history, f)


    if __name__ == "__main__":
        main()
    ''')


def test_tf_multiworker_strategy_is_a_multi_process_program():
    issues = scan.scan_source(KERAS_MWMS, "train.py")
    assert {i.launch for i in issues} == {"tf-multiworker"}, issues
    # every worker downloads MNIST into ~/.keras/datasets at once (issue 42 held-out miss), and writes history.json
    assert [(i.rule, i.line, i.level) for i in issues] == [("download-all-ranks", 7, "info"),
                                                          ("log-all-ranks", 12, "info")], issues
    chief = KERAS_MWMS.replace('    with open("history.json", "w") as f:\n        json.dump',
                               '    if strategy.cluster_resolver.task_id == 0:\n'
                               '        with open("history.json", "w") as f:\n            json.dump').replace(
        "load_data()", 'load_data(path=f"mnist-{strategy.cluster_resolver.task_id}.npz")')
    assert chief != KERAS_MWMS
    assert scan.scan_source(chief, "train.py") == []


KERAS_HVD = textwrap.dedent('''\
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd


    def main():
        hvd.init()
        gpus = tf.config.experimental.list_physical_devices("GPU")
        if gpus:
            tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")
        (x, y), _ = tf.keras.datasets.mnist.load_data()
        model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
        opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01 * hvd.size()))
        model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
        callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
        model.fit(x, y, epochs=3, batch_size=64, callbacks=callbacks)


    if __name__ == "__main__":
        main()
    ''')


def test_keras_fit_on_full_arrays_on_every_rank_is_not_sharded():
    issues = scan.scan_source(KERAS_HVD, "train.py")
    assert [(i.rule, i.line, i.level) for i in issues] == [("download-all-ranks", 10, "info"),
                                                          ("data-not-sharded", 15, "info")], issues
    sharded = KERAS_HVD.replace("model.fit(x, y,", "model.fit(x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()],"
                                ).replace("load_data()", "load_data(path='mnist-%d.npz' % hvd.rank())")
    assert scan.scan_source(sharded, "train.py") == []


def test_edits_of_existing_rules_and_none_where_the_fix_is_not_one_line():
    src = textwrap.dedent('''\
        import torch
        import horovod.torch as hvd


        def main():
            hvd.init()
            torch.cuda.set_device(hvd.local_rank())
            model = torch.nn.Linear(2, 2).cuda()
            opt = torch.optim.SGD(model.parameters(), lr=0.1 + 0.01)
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            torch.save(model.state_dict(), "ckpt.pt")
            torch.save(model.state_dict(),
                       "last.pt")


        if __name__ == "__main__":
            main()
        ''')
    got = {(i.rule, i.line): i.edit for i in scan.scan_source(src, "train.py")}
    assert got[("lr-not-scaled", 9)]["new"] == \
        "    opt = torch.optim.SGD(model.parameters(), lr=(0.1 + 0.01) * hvd.size())"
    assert got[("checkpoint-all-ranks", 12)]["new"] == \
        '    if hvd.rank() == 0: torch.save(model.state_dict(), "ckpt.pt")'
    assert got[("checkpoint-all-ranks", 13)] is None  # the call spans two lines: no one-line edit

