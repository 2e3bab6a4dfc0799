"""The static ``--script`` scan (envtool.checks.scan): each risky pattern at the right line."""
import json
import sys
import textwrap

from conftest import run_envtool
from envtool.checks import scan

RISKY = textwrap.dedent('''\
    import torch
    import torch.multiprocessing as mp
    import horovod.torch as hvd
    from torch.utils.data import DataLoader

    hvd.init()
    mp.set_start_method("fork")
    kwargs = {"num_workers": 4}
    if kwargs.get("num_workers", 0) > 0 and hasattr(mp, "_supports_context") and mp._supports_context:
        kwargs["multiprocessing_context"] = "forkserver"
    loader = DataLoader(dataset, batch_size=32, num_workers=4)
    loader2 = DataLoader(dataset, num_workers=args.workers)
    ctx = mp.get_context("spawn")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    for epoch in range(10):
        torch.save(model.state_dict(), "ckpt.pt")
    ''')

GOOD = textwrap.dedent('''\
    import torch
    import horovod.torch as hvd
    from torch.utils.data import DataLoader

    def save(model):
        if hvd.rank() != 0:
            return
        torch.save(model.state_dict(), "ckpt.pt")

    def main():
        hvd.init()
        lr = args.lr * hvd.size()
        loader = DataLoader(dataset, num_workers=4, multiprocessing_context="forkserver")
        loader0 = DataLoader(dataset, num_workers=0)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        if hvd.rank() == 0:
            torch.save(model.state_dict(), "ckpt.pt")

    if __name__ == "__main__":
        main()
    ''')

EXPECTED = {("no-broadcast", 6), ("fork-start-method", 7), ("dead-supports-context", 9),
            ("dataloader-workers", 11), ("dataloader-workers", 12), ("no-main-guard", 13),
            ("lr-not-scaled", 14), ("checkpoint-all-ranks", 17)}


def test_each_risky_pattern_at_its_line():
    issues = scan.scan_source(RISKY, "train.py")
    assert {(i.rule, i.line) for i in issues} == EXPECTED
    assert all(i.path == "train.py" and i.fix for i in issues)
    assert set(scan.RULES) >= {i.rule for i in issues}


def test_clean_script_has_no_findings():
    assert scan.scan_source(GOOD, "good.py") == []


def test_global_forkserver_covers_dataloaders_and_keras_rules():
    src = textwrap.dedent('''\
        import multiprocessing as mp
        import tensorflow as tf
        import horovod.tensorflow.keras as hvd
        from torch.utils.data import DataLoader
        if __name__ == "__main__":
            mp.set_start_method("forkserver")
            hvd.init()
            DataLoader(ds, num_workers=8)
            opt = tf.optimizers.Adam(args.lr * hvd.size())
            opt2 = tf.keras.optimizers.SGD(learning_rate=0.1)
            callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
            if hvd.rank() == 0:
                callbacks.append(tf.keras.callbacks.ModelCheckpoint("./checkpoints"))
            model.save_weights("w.h5")
        ''')
    issues = scan.scan_source(src, "k.py")
    assert {(i.rule, i.line) for i in issues} == {("lr-not-scaled", 10), ("checkpoint-all-ranks", 14)}


def test_no_horovod_means_no_horovod_rules():
    src = "import torch\nopt = torch.optim.Adam(params, lr=1e-3)\ntorch.save(m, 'x')\n"
    assert scan.scan_source(src, "plain.py") == []


def test_syntax_error_is_reported_with_line():
    issues = scan.scan_source("x = 1\ndef f(:\n", "bad.py")
    assert [(i.rule, i.line) for i in issues] == [("syntax", 2)]


def test_cli_script_check_names_file_and_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(RISKY)
    proc = run_envtool("doctor", "--prefix", sys.prefix, "--only", "script", "--script", script, "--json")
    assert proc.returncode == 0, proc.stderr  # script findings warn; nothing failed
    data = json.loads(proc.stdout)
    (f,) = data["findings"]
    assert f["id"] == "script" and f["status"] == "warn"
    assert {(i["rule"], i["line"]) for i in f["details"]["issues"]} == EXPECTED
    assert any(item.startswith(f"{script}:11: [dataloader-workers]") for item in f["details"]["items"])
    text = run_envtool("doctor", "--prefix", sys.prefix, "--only", "script", "--script", script)
    assert f"{script}:7: [fork-start-method]" in text.stdout
