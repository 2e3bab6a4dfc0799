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
