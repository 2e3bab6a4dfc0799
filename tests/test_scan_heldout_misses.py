"""Issue 42: the held-out corpus's known misses, each on a small script of our own scanned for real
(``sampler-no-set-epoch`` with a project ``Trainer`` class, a download through a project helper, a
save after Lightning's ``trainer.fit``, a ``save_on_master`` helper chain under Horovod, Keras's
``load_data()`` on every worker), and item 4: the scan's memory reduced (a large file parsed in
pieces, the same tree as one ``ast.parse``)."""
import ast
import textwrap
import tracemalloc
from pathlib import Path

from envtool.checks import scan
from envtool.checks.scan.facts import PIECE_CHARS, parse_in_pieces

REPO = Path(__file__).resolve().parent.parent


def _found(issues) -> list:
    return [(i.rule, i.line) for i in issues]


TRAINER = textwrap.dedent('''\
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    class Trainer:
        def __init__(self, ds, epochs):
            self.sampler = DistributedSampler(ds)
            self.loader = DataLoader(ds, batch_size=8, sampler=self.sampler)
            self.epochs = epochs

        def _run_epoch(self, epoch):
            self.loader.sampler.set_epoch(epoch)
            for x in self.loader:
                pass

        def train(self):
            for epoch in range(self.epochs):
                self._run_epoch(epoch)


    def main():
        dist.init_process_group("gloo")
        Trainer(list(range(100)), 3).train()


    if __name__ == "__main__":
        main()
    ''')


def test_set_epoch_in_a_project_trainer_class_and_never_called():
    # called in a method of the project's own Trainer: no finding
    assert scan.scan_source(TRAINER, "train.py") == []
    # never called: the project's Trainer is not Lightning's or Hugging Face's, which call it themselves
    never = TRAINER.replace("        self.loader.sampler.set_epoch(epoch)\n", "")
    issues = scan.scan_source(never, "train.py")
    assert _found(issues) == [("sampler-no-set-epoch", 8)], issues
    assert issues[0].edit["new"].endswith("\n            self.sampler.set_epoch(epoch)")
    # a Trainer imported from a framework still runs the loop (and calls set_epoch) itself
    hf = "from transformers import Trainer\n" + never.replace("class Trainer:", "class Runner:").replace(
        "Trainer(list(range(100)), 3).train()", "Runner(list(range(100)), 3).train(); Trainer()")
    assert scan.scan_source(hf, "train.py") == []


def test_download_through_a_project_helper_on_every_rank(tmp_path):
    (tmp_path / "data.py").write_text(textwrap.dedent('''\
        import torchvision


        def get_dataset(root):
            return torchvision.datasets.CIFAR10(root, train=True, download=True)
        '''))
    train = textwrap.dedent('''\
        import torch.distributed as dist
        from torch.utils.data import DataLoader
        from torch.utils.data.distributed import DistributedSampler

        from data import get_dataset


        def main():
            dist.init_process_group("gloo")
            ds = get_dataset("/shared/data")
            loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds, shuffle=False))
            for x in loader:
                pass


        if __name__ == "__main__":
            main()
        ''')
    (tmp_path / "train.py").write_text(train)
    issues = scan.scan_paths([tmp_path / "train.py"])
    assert [(Path(i.path).name, i.line, i.rule) for i in issues] == [("data.py", 5, "download-all-ranks")], issues
    # rank 0 first through the helper, a barrier, then every rank reads what is there
    (tmp_path / "train.py").write_text(train.replace(
        '    ds = get_dataset("/shared/data")\n',
        '    if dist.get_rank() == 0:\n        get_dataset("/shared/data")\n    dist.barrier()\n'
        '    ds = get_dataset("/shared/data")\n'))
    assert scan.scan_paths([tmp_path / "train.py"]) == []


LIGHTNING = textwrap.dedent('''\
    import torch
    import pytorch_lightning as pl


    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)


    def main():
        model = Model()
        trainer = pl.Trainer(accelerator="gpu", devices=4, num_nodes=2, strategy="ddp", max_epochs=3)
        trainer.fit(model, torch.utils.data.DataLoader(torch.randn(64, 2), batch_size=8))
        torch.save(model.state_dict(), "final.pt")
        model.save_pretrained("out")


    if __name__ == "__main__":
        main()
    ''')


def test_save_after_lightning_fit_runs_on_every_rank():
    issues = scan.scan_source(LIGHTNING, "train.py")
    assert _found(issues) == [("checkpoint-all-ranks", 21), ("checkpoint-all-ranks", 22)], issues
    assert {i.launch for i in issues} == {"lightning"}
    assert issues[0].edit["new"] == '    if trainer.is_global_zero: torch.save(model.state_dict(), "final.pt")'
    guarded = LIGHTNING.replace('    torch.save(model.state_dict(), "final.pt")\n    model.save_pretrained',
                                '    if trainer.is_global_zero:\n        torch.save(model.state_dict(), '
                                '"final.pt")\n        model.save_pretrained')
    assert guarded != LIGHTNING
    assert scan.scan_source(guarded, "train.py") == []
    # one process (no devices/num_nodes/strategy asking for more): nothing to guard
    one = LIGHTNING.replace('devices=4, num_nodes=2, strategy="ddp", ', "devices=1, ")
    assert scan.scan_source(one, "train.py") == []
    # a strategy object built elsewhere asks for several processes too
    obj = LIGHTNING.replace('devices=4, num_nodes=2, strategy="ddp", ', "strategy=make_strategy(), ")
    assert _found(scan.scan_source(obj, "train.py")) == [("checkpoint-all-ranks", 21), ("checkpoint-all-ranks", 22)]


SAVE_ON_MASTER = textwrap.dedent('''\
    import torch
    import torch.distributed as dist
    import horovod.torch as hvd


    def is_dist_avail_and_initialized():
        if not dist.is_available():
            return False
        if not dist.is_initialized():
            return False
        return True


    def get_rank():
        if not is_dist_avail_and_initialized():
            return 0
        return dist.get_rank()


    def is_main_process():
        return get_rank() == 0


    def save_on_master(*args, **kwargs):
        if is_main_process():
            torch.save(*args, **kwargs)


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


def test_save_on_master_helper_chain_reads_torch_distributed_under_horovod():
    # get_rank() is 0 when no process group exists: under Horovod every rank is "the main process"
    issues = scan.scan_source(SAVE_ON_MASTER, "train.py")
    assert _found(issues) == [("checkpoint-all-ranks", 36)], issues
    assert "hvd.rank() == 0" in issues[0].fix
    # under torch.distributed the same helpers guard the write
    ddp = SAVE_ON_MASTER.replace("    hvd.init()\n", "    dist.init_process_group('nccl')\n    hvd.init()\n")
    assert scan.scan_source(ddp, "train.py") == []
    # a helper that reads Horovod's rank guards it under Horovod
    assert scan.scan_source(SAVE_ON_MASTER.replace("return dist.get_rank()", "return hvd.rank()"), "train.py") == []


KERAS = textwrap.dedent('''\
    import tensorflow as tf


    def main():
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        (x_train, y_train), _ = tf.keras.datasets.mnist.load_data()
        dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(64)
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)])
            model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
        model.fit(dataset, epochs=3)


    if __name__ == "__main__":
        main()
    ''')


def test_keras_load_data_on_every_worker_into_the_shared_cache():
    issues = scan.scan_source(KERAS, "train.py")
    assert [(i.rule, i.line, i.level, i.launch) for i in issues] == [
        ("download-all-ranks", 6, "info", "tf-multiworker")], issues
    assert "~/.keras/datasets" in issues[0].message
    # a second load of the same dataset finds the first one's file in the cache
    twice = KERAS.replace("    dataset = ", "    _, (x_test, y_test) = tf.keras.datasets.mnist.load_data()\n    dataset = ")
    assert _found(scan.scan_source(twice, "train.py")) == [("download-all-ranks", 6)]
    # a file per worker (Horovod's own example names it by the rank): no collision
    per_worker = KERAS.replace("load_data()", 'load_data(path=f"mnist-{strategy.cluster_resolver.task_id}.npz")')
    assert scan.scan_source(per_worker, "train.py") == []
    # one process: nothing to collide with
    assert scan.scan_source(KERAS.replace("tf.distribute.MultiWorkerMirroredStrategy()", "None"), "train.py") == []


def _real_text() -> str:
    """Real Python (this package's scan modules), well over one piece, without __future__ imports."""
    parts = [p.read_text() for p in sorted((REPO / "envtool" / "checks" / "scan").rglob("*.py"))]
    text = "\n".join(p.replace("from __future__ import annotations", "pass") for p in parts)
    assert len(text) > 3 * PIECE_CHARS
    return text


def test_parse_in_pieces_gives_the_tree_of_one_parse():
    text = _real_text()
    dump = ast.dump(ast.parse(text), include_attributes=True)
    assert ast.dump(parse_in_pieces(text, "x.py"), include_attributes=True) == dump
    # a cut inside a string, and a syntax error in a later piece: the same as one parse
    inside = text[:PIECE_CHARS] + 'S = """\ndef not_code(:\n"""\n' + text[PIECE_CHARS:]
    inside = inside[:inside.index("\n", PIECE_CHARS) + 1] + text[PIECE_CHARS:]
    try:
        ast.parse(inside)
    except SyntaxError as exc:
        want = (exc.lineno, exc.msg)
    else:
        want = ast.dump(ast.parse(inside), include_attributes=True)
    try:
        got = ast.dump(parse_in_pieces(inside, "x.py"), include_attributes=True)
    except SyntaxError as exc:
        got = (exc.lineno, exc.msg)
    assert got == want
    broken = text + "\ndef broken(:\n    pass\n"
    errors = []
    for parse in (lambda t: ast.parse(t), lambda t: parse_in_pieces(t, "x.py")):
        try:
            parse(broken)
        except SyntaxError as exc:
            errors.append((exc.lineno, exc.msg))
    assert len(errors) == 2 and errors[0] == errors[1]
    # a multi-line string whose lines look like top-level code, spanning a cut
    quoted = text[:PIECE_CHARS] + "\nQ = '''\n" + "def f():\n    pass\n" * 8000 + "'''\n" + text[PIECE_CHARS:]
    quoted = "\n".join(line for line in quoted.split("\n"))
    try:
        want2 = ast.dump(ast.parse(quoted), include_attributes=True)
    except SyntaxError as exc:
        want2 = (exc.lineno, exc.msg)
    try:
        got2 = ast.dump(parse_in_pieces(quoted, "x.py"), include_attributes=True)
    except SyntaxError as exc:
        got2 = (exc.lineno, exc.msg)
    assert got2 == want2


def _parse_peak(parse, text: str) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        tree = parse(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert tree.body
    return peak


def test_parse_memory_per_mib_of_source_is_reduced():
    # the benchmark's source shape (functions), about 250 KB: one ast.parse holds the parser's working
    # memory for the whole file beside the tree it returns (a scan's peak: about 130 MiB per MiB of
    # source before issue 42's item 4); in pieces, that memory is held for one piece at a time
    import sys
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_scan
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    text = bench_scan.source("functions", 0.25)
    whole = _parse_peak(ast.parse, text)
    pieces = _parse_peak(lambda t: parse_in_pieces(t, "bench.py"), text)
    assert whole / len(text) > 100, f"one parse: {whole / len(text):.1f} MiB per MiB"
    assert pieces / len(text) < 90, \
        f"in pieces: {pieces / len(text):.1f} MiB per MiB (one parse: {whole / len(text):.1f})"
