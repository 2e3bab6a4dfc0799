"""Issue 26: the scan's new rules, program scope, launch awareness, values, strict exit status,
suppression comments and limits. Every script here is a small real file (no mocks)."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run_envtool
from envtool.checks import scan
from helpers.speed import scaled

REPO = Path(__file__).resolve().parent.parent

# a complete, correct Horovod + PyTorch script: the base every case below edits
CLEAN = textwrap.dedent('''\
    import torch
    import horovod.torch as hvd
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def main():
        hvd.init()
        torch.cuda.set_device(hvd.local_rank())
        model = torch.nn.Linear(8, 1).cuda()
        sampler = DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        for epoch in range(3):
            sampler.set_epoch(epoch)  # issue 42: without it each epoch repeats one order
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
            if hvd.rank() == 0:
                torch.save(model.state_dict(), "ckpt.pt")


    if __name__ == "__main__":
        main()
    ''')


def _line(src, text):
    hits = [n for n, line in enumerate(src.splitlines(), 1) if text in line]
    assert len(hits) == 1, (text, hits)
    return hits[0]


def _rules(src, **kw):
    return sorted((i.rule, i.line, i.level) for i in scan.scan_source(src, "train.py", **kw))


def _shift(text):
    """The edits below are written with the body of main() at 8 spaces; CLEAN has it at 4."""
    return "\n".join(line[4:] if line.startswith("    ") else line for line in text.split("\n"))


def _edit(old, new, src=CLEAN):
    if src.count(old) != 1:
        old, new = _shift(old), _shift(new)
    assert src.count(old) == 1, old
    return src.replace(old, new)


def test_clean_script_is_clean():
    assert _rules(CLEAN) == []


# -- item 1: the missing rules ---------------------------------------------------------------
@pytest.mark.parametrize("case", ["missing", "late", "module-level-before-init"])
def test_hvd_init(case):
    if case == "missing":
        src = _edit("        hvd.init()\n", "")
        rule, at = "hvd-init-missing", "torch.cuda.set_device(hvd.local_rank())"
    elif case == "late":
        src = _edit("        hvd.init()\n        torch.cuda.set_device(hvd.local_rank())\n",
                    "        torch.cuda.set_device(hvd.local_rank())\n        hvd.init()\n")
        rule, at = "hvd-init-late", "torch.cuda.set_device("
    else:
        src = _edit("        hvd.init()\n", "")
        src = _edit("def main():\n", "RANK = hvd.rank()\n\n\ndef main():\n", src).replace(
            '    main()\n', '    hvd.init()\n    main()\n')
        rule, at = "hvd-init-late", "RANK = hvd.rank()"
    found = [(r, line) for r, line, level in _rules(src) if r.startswith("hvd-init")]
    assert found == [(rule, _line(src, at))]


def test_no_gpu_pinning_only_when_cuda_is_used():
    src = _edit("        torch.cuda.set_device(hvd.local_rank())\n", "")
    assert ("no-gpu-pinning", _line(src, "hvd.init()"), "info") in _rules(src)  # held-out precision < 0.9
    cpu = src.replace(".cuda()", "").replace("x.cuda(), y.cuda()", "x, y")
    assert not [r for r in _rules(cpu) if r[0] == "no-gpu-pinning"]
    # pinned to the global rank: a GPU index that does not exist on the second node
    glob = _edit("torch.cuda.set_device(hvd.local_rank())", "torch.cuda.set_device(hvd.rank())")
    assert ("no-gpu-pinning", _line(glob, "set_device"), "info") in _rules(glob)
    # other pinning idioms
    for pin in ("torch.cuda.set_device(local_rank)", 'os.environ["CUDA_VISIBLE_DEVICES"] = str(hvd.local_rank())',
                "model = model.to(hvd.local_rank())"):
        ok = _edit("torch.cuda.set_device(hvd.local_rank())", pin)
        assert not [r for r in _rules(ok) if r[0] == "no-gpu-pinning"], pin


def test_optimizer_not_wrapped():
    src = _edit("        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())\n", "")
    assert [r for r in _rules(src) if r[0] == "optimizer-not-wrapped"] == [
        ("optimizer-not-wrapped", _line(src, "torch.optim.SGD"), "warn")]
    tape = _edit("        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())\n",
                 "        grads = [hvd.allreduce(p.grad) for p in model.parameters()]\n")
    assert not [r for r in _rules(tape) if r[0] == "optimizer-not-wrapped"]


def test_data_not_sharded_and_its_equivalents():
    src = _edit("        sampler = DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())\n"
                "        loader = DataLoader(dataset, batch_size=32, sampler=sampler)\n",
                "        loader = DataLoader(dataset, batch_size=32, shuffle=True)\n")
    assert [r for r in _rules(src) if r[0] == "data-not-sharded"] == [
        ("data-not-sharded", _line(src, "loader = DataLoader("), "warn")]
    for equivalent in ("        dataset = files[hvd.rank()::hvd.size()]\n",
                       "        dataset = dataset.shard(hvd.size(), hvd.rank())\n",
                       "        dataset = load_dataset_part(path, hvd.rank())\n"):
        ok = _edit("        loader = DataLoader(dataset, batch_size=32, shuffle=True)\n",
                   equivalent + "        loader = DataLoader(dataset, batch_size=32, shuffle=True)\n", src)
        assert not [r for r in _rules(ok) if r[0] == "data-not-sharded"], equivalent
    local_sampler = _edit("shuffle=True)", "sampler=RandomSampler(dataset))", src)
    assert [r[0] for r in _rules(local_sampler) if r[0] == "data-not-sharded"] == ["data-not-sharded"]


def test_checkpoint_local_rank_guard():
    src = _edit("            if hvd.rank() == 0:\n", "            if hvd.local_rank() == 0:\n")
    assert [r for r in _rules(src) if r[0].startswith("checkpoint")] == [
        ("checkpoint-local-rank", _line(src, "torch.save"), "warn")]
    # under torchrun with nothing naming nodes: a judgement (info); naming nodes makes it a warning
    ddp = textwrap.dedent('''\
        import os
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DataLoader, DistributedSampler


        def main():
            dist.init_process_group("nccl")
            local_rank = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(local_rank)
            model = DDP(torch.nn.Linear(8, 1).cuda(), device_ids=[local_rank])
            loader = DataLoader(data, sampler=DistributedSampler(data), num_workers=4)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            if local_rank == 0:
                torch.save(model.state_dict(), "ckpt.pt")


        if __name__ == "__main__":
            main()
        ''')
    assert _rules(ddp) == [("checkpoint-local-rank", _line(ddp, "torch.save"), "info")]
    multi = ddp.replace("    local_rank = int(", '    node_rank = int(os.environ["GROUP_RANK"])\n    local_rank = int(')
    assert _rules(multi) == [("checkpoint-local-rank", _line(multi, "torch.save"), "warn")]
    unguarded = ddp.replace("    if local_rank == 0:\n        torch.save", "    if True:\n        torch.save")
    assert _rules(unguarded) == [("checkpoint-all-ranks", _line(unguarded, "torch.save"), "info")]


# -- item 2: program scope ---------------------------------------------------------------------
def _project(tmp_path, files):
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return tmp_path


SHARED = {
    "data.py": '''\
        import torch
        from torch.utils.data import DataLoader


        def make_loader(dataset, **kw):
            return DataLoader(dataset, batch_size=32, **kw)


        def save(model):
            torch.save(model.state_dict(), "model.pt")
        ''',
    "baseline.py": '''\
        import torch
        from data import make_loader, save


        def main():
            model = torch.nn.Linear(8, 1)
            loader = make_loader(dataset, num_workers=4)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            save(model)


        if __name__ == "__main__":
            main()
        ''',
}


def test_baseline_sharing_modules_with_a_horovod_script_gets_no_horovod_rules(tmp_path):
    root = _project(tmp_path, dict(SHARED, **{"hvd_train.py": CLEAN.replace(
        "from torch.utils.data import DataLoader\n", "from torch.utils.data import DataLoader\nfrom data import save\n")
        .replace('            torch.save(model.state_dict(), "ckpt.pt")', "            save(model)")}))
    report = scan.scan_project([root])
    launches = {Path(p["entry"]).name: p["launch"] for p in report.programs}
    assert launches == {"baseline.py": "single", "hvd_train.py": "horovod"}
    assert [(Path(i.path).name, i.rule) for i in report.issues] == []
    # the helper called on every rank by the Horovod script only: found there, at its call
    (root / "hvd_train.py").write_text((root / "hvd_train.py").read_text().replace(
        "        if hvd.rank() == 0:\n            save(model)", "        save(model)"))
    issues = scan.scan_paths([root])
    assert [(Path(i.path).name, i.rule, i.entry.endswith("hvd_train.py")) for i in issues] == [
        ("hvd_train.py", "checkpoint-all-ranks", True)]


def test_entry_option_limits_the_scan_and_unreached_broadcast_does_not_count(tmp_path):
    src = _edit("        hvd.broadcast_parameters(model.state_dict(), root_rank=0)\n"
                "        hvd.broadcast_optimizer_state(optimizer, root_rank=0)\n", "")
    src = src.replace("def main():", "def sync(model, optimizer):\n"
                      "    hvd.broadcast_parameters(model.state_dict(), root_rank=0)\n\n\ndef main():")
    root = _project(tmp_path, dict(SHARED, **{"train.py": src}))
    issues = scan.scan_paths([root], entries=[root / "train.py"])
    assert {Path(i.path).name for i in issues} == {"train.py"}
    assert [i.rule for i in issues] == ["no-broadcast"]  # sync() is never called
    called = src.replace("    for epoch in range(3):", "    sync(model, optimizer)\n    for epoch in range(3):")
    (root / "train.py").write_text(called)
    assert scan.scan_paths([root], entries=[root / "train.py"]) == []


# -- item 3: launch awareness ------------------------------------------------------------------
DDP_WORKERS = textwrap.dedent('''\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler


    def worker(gpu, world):
        dist.init_process_group("nccl", rank=gpu, world_size=world)
        torch.cuda.set_device(gpu)
        model = DistributedDataParallel(torch.nn.Linear(8, 1).cuda(gpu), device_ids=[gpu])
        loader = DataLoader(data, sampler=DistributedSampler(data), num_workers=4)
        mp.set_start_method("fork", force=True)


    if __name__ == "__main__":
        mp.spawn(worker, args=(4,), nprocs=4)
    ''')


def test_forked_workers_are_an_mpi_risk_only():
    assert _rules(DDP_WORKERS) == []
    forced = scan.scan_source(DDP_WORKERS, "ddp.py", launch="horovod")
    assert sorted(i.rule for i in forced) == ["dataloader-workers", "fork-start-method"]
    assert all("[launch assumed: Horovod" in i.message and "--launch horovod" in i.message for i in forced)
    mpi = DDP_WORKERS.replace('init_process_group("nccl"', 'init_process_group("mpi"')
    issues = scan.scan_source(mpi, "ddp.py")
    assert sorted(i.rule for i in issues) == ["dataloader-workers", "fork-start-method"]
    assert all("init_process_group(backend='mpi')" in i.message for i in issues)


# -- item 4: values --------------------------------------------------------------------------
MNIST_KWARGS = textwrap.dedent('''\
    import torch
    import torch.multiprocessing as mp
    import horovod.torch as hvd
    from torch.utils.data import DataLoader

    START = "fork"
    NUM_WORKERS = 2


    class Method:
        SPAWN = "spawn"
        FORK = "fork"


    def main():
        hvd.init()
        train_kwargs = {"batch_size": 64}
        cuda_kwargs = {"num_workers": 1, "pin_memory": True}
        train_kwargs.update(cuda_kwargs)
        a = DataLoader(ds, sampler=s, **train_kwargs)
        b = DataLoader(ds, sampler=s, num_workers=NUM_WORKERS)
        c = DataLoader(ds, sampler=s, num_workers=2, multiprocessing_context=START)
        d = DataLoader(ds, sampler=s, num_workers=2, multiprocessing_context=Method.FORK)
        e = DataLoader(ds, sampler=s, num_workers=2, multiprocessing_context=Method.SPAWN)


    if __name__ == "__main__":
        main()
    ''')


def test_indirect_values_resolved():
    got = [r for r in _rules(MNIST_KWARGS) if r[0] in ("dataloader-workers", "fork-start-method")]
    src = MNIST_KWARGS
    assert got == sorted([("dataloader-workers", _line(src, "a = DataLoader"), "warn"),
                          ("dataloader-workers", _line(src, "b = DataLoader"), "warn"),
                          ("fork-start-method", _line(src, "c = DataLoader"), "warn"),
                          ("fork-start-method", _line(src, "d = DataLoader"), "warn")])
    method = MNIST_KWARGS.replace('    hvd.init()\n', '    hvd.init()\n    mp.set_start_method(START)\n')
    assert ("fork-start-method", _line(method, "mp.set_start_method(START)"), "warn") in _rules(method)
    # the same names, judged where nothing MPI is in the process: nothing to say
    assert not [r for r in _rules(MNIST_KWARGS, launch="torchrun") if r[0] != "hvd-init-missing"]


def test_learning_rate_forms():
    adam = _edit("torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())", "torch.optim.Adam(model.parameters(), lr=0.01)")
    (i,) = [i for i in scan.scan_source(adam, "t.py") if i.rule == "lr-not-scaled"]
    assert i.level == "info" and "adaptive optimizer" in i.message
    local = _edit("lr=0.01 * hvd.size()", "lr=0.01 * hvd.local_size()")
    (i,) = [i for i in scan.scan_source(local, "t.py") if i.rule == "lr-not-scaled"]
    assert i.level == "warn" and "local_size" in i.message
    onecycle = _edit("        hvd.broadcast_parameters(", "        sched = torch.optim.lr_scheduler.OneCycleLR(optimizer, "
                     "max_lr=0.1, total_steps=100)\n        hvd.broadcast_parameters(")
    assert [r for r in _rules(onecycle) if r[0] == "lr-not-scaled"] == [
        ("lr-not-scaled", _line(onecycle, "OneCycleLR"), "warn")]
    plain = _edit("lr=0.01 * hvd.size()", "lr=0.01")
    mention = plain.replace("    main()\n", "    main()\n    print(hvd.Adasum)\n")
    assert [r[0] for r in _rules(mention) if r[0] == "lr-not-scaled"] == ["lr-not-scaled"]
    adasum = plain.replace("named_parameters=model.named_parameters())",
                           "named_parameters=model.named_parameters(), op=hvd.Adasum)")
    assert not [r for r in _rules(adasum) if r[0] == "lr-not-scaled"]


def test_safetensors_save_file_is_a_checkpoint():
    src = _edit("            if hvd.rank() == 0:\n                torch.save(model.state_dict(), \"ckpt.pt\")\n",
                "            save_file(model.state_dict(), \"model.safetensors\")\n").replace(
        "import torch\n", "import torch\nfrom safetensors.torch import save_file\n", 1)
    assert [r for r in _rules(src) if r[0].startswith("checkpoint")] == [
        ("checkpoint-all-ranks", _line(src, "save_file(model"), "info")]


# -- item 5: exit status, suppression, limits --------------------------------------------------
def test_strict_fail_on_and_suppression(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(_edit("lr=0.01 * hvd.size()", "lr=0.01"))
    base = ("doctor", "--prefix", sys.prefix, "--only", "script", "--script", script)
    assert run_envtool(*base).returncode == 0
    strict = run_envtool(*base, "--strict", "--json")
    assert strict.returncode == 1, strict.stderr
    data = json.loads(strict.stdout)
    assert data["exit_status"] == 1 and data["fail_on"] == "warn" and data["gated"] == 1
    assert run_envtool(*base, "--fail-on", "warn").returncode == 1
    # accepted risk: the comment silences that rule on that line only
    script.write_text(_edit("lr=0.01 * hvd.size())", "lr=0.01)  # envtool: ignore[lr-not-scaled]"))
    quiet = run_envtool(*base, "--strict", "--json")
    assert quiet.returncode == 0, quiet.stdout
    (f,) = json.loads(quiet.stdout)["findings"]
    assert f["details"]["issues"] == [] and [i["rule"] for i in f["details"]["suppressed"]] == ["lr-not-scaled"]
    script.write_text(_edit("lr=0.01 * hvd.size())", "lr=0.01)  # envtool: ignore[no-broadcast]"))
    assert run_envtool(*base, "--strict").returncode == 1
    # an info finding gates only with --fail-on info
    script.write_text(_edit("torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())",
                            "torch.optim.Adam(model.parameters(), lr=0.01)"))
    assert run_envtool(*base, "--strict").returncode == 0
    assert run_envtool(*base, "--fail-on", "info").returncode == 1
    bad = run_envtool(*base, "--entry", tmp_path / "nope.py")
    assert bad.returncode == 2 and "--entry" in bad.stderr and "Traceback" not in bad.stderr
    alone = run_envtool("doctor", "--prefix", sys.prefix, "--only", "script", "--strict")
    assert alone.returncode == 2 and "--strict" in alone.stderr


def test_launch_option_overrides(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(DDP_WORKERS)
    base = ("doctor", "--prefix", sys.prefix, "--only", "script", "--script", script, "--strict")
    assert run_envtool(*base).returncode == 0
    forced = run_envtool(*base, "--launch", "mpi", "--json")
    assert forced.returncode == 1
    (f,) = json.loads(forced.stdout)["findings"]
    assert f["details"]["programs"][0]["launch"] == "mpi"
    assert run_envtool(*base, "--launch", "nonsense").returncode == 2


MEASURE = '''
import resource, subprocess, sys
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(proc.returncode)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(proc.stderr.replace("\\n", " "))
'''


def _measured(*args):
    """(exit status, peak RSS in MiB, stderr) of ``envtool ARGS`` run in a fresh process."""
    cmd = [sys.executable, "-c", MEASURE, sys.executable, "-m", "envtool", *[str(a) for a in args]]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=scaled(600)).stdout.splitlines()
    return int(out[0]), int(out[1]) / 1024, out[2] if len(out) > 2 else ""


@pytest.mark.slow  # over 5 s with two workers: the full suite only (tests/README.md, fast tier)
def test_huge_tree_stops_with_a_clear_message_in_bounded_memory(tmp_path):
    block = CLEAN.replace("def main():", "def main_{n}():").replace("    main()\n", "    main_0()\n")
    tree = tmp_path / "tree"
    for d in range(12):  # 12 x 40 files x ~25 KB: about 12 MB of source, over the default 8 MiB
        sub = tree / f"pkg{d}"
        sub.mkdir(parents=True)
        for f in range(40):
            (sub / f"m{f}.py").write_text("".join(block.replace("{n}", str(k)) for k in range(25)))
    status, rss, err = _measured("doctor", "--prefix", sys.prefix, "--only", "script", "--script", tree)
    assert status == 2, err
    assert "MiB of Python source" in err and "--entry" in err and "--max-source-mb" in err
    assert rss < 600, rss  # 8 MiB of source at most: about 40 MiB per MiB, plus the interpreter
    status, rss, err = _measured("doctor", "--prefix", sys.prefix, "--only", "script", "--script", tree,
                                 "--max-files", "100")
    assert status == 2 and "more than 100 Python files" in err
    assert rss < 120, rss  # stopped while listing names: nothing parsed


def test_report_is_capped(tmp_path):
    script = tmp_path / "many.py"
    lines = ["import torch", "import horovod.torch as hvd", "hvd.init()",
             "hvd.broadcast_parameters(m.state_dict(), root_rank=0)", "hvd.DistributedOptimizer(o)"]
    lines += [f'torch.save(m, "c{i}.pt")' for i in range(800)]
    script.write_text("\n".join(lines) + "\n")
    report = scan.scan_project([script])
    assert len(report.issues) == scan.Limits().max_issues and report.omitted == 300
    proc = run_envtool("doctor", "--prefix", sys.prefix, "--only", "script", "--script", script, "--json")
    (f,) = json.loads(proc.stdout)["findings"]
    assert f["details"]["omitted"] == 300 and len(f["details"]["issues"]) == 500
    assert len(proc.stdout) < 2_000_000


def test_mpi4py_in_a_ddp_program_makes_it_an_mpi_launch():
    src = "from mpi4py import MPI\n" + DDP_WORKERS
    issues = scan.scan_source(src, "ddp_mpi.py")
    assert sorted(i.rule for i in issues) == ["dataloader-workers", "fork-start-method"]
    assert all(i.launch == "mpi" and "imports mpi4py" in i.message for i in issues)


KERAS_GEN = textwrap.dedent('''\
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd

    hvd.init()
    gpus = tf.config.experimental.list_physical_devices("GPU")
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")
    gen = tf.keras.preprocessing.image.ImageDataGenerator(rescale=1 / 255)
    train = gen.flow_from_directory("data/train", batch_size=32, seed=2022)
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01 * hvd.size()))
    model.compile(optimizer=opt, loss="mse")
    model.fit(train, steps_per_epoch=len(train) // hvd.size(),
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    ''')


def test_keras_generator_with_one_seed_on_every_rank_is_not_sharded():
    assert _rules(KERAS_GEN) == [("data-not-sharded", _line(KERAS_GEN, "model.fit("), "warn")]
    per_rank = KERAS_GEN.replace("seed=2022", "seed=2022 + hvd.rank()")
    assert _rules(per_rank) == []


def test_local_rank_guard_around_a_helper_chain_is_reported_at_the_guarded_call():
    src = textwrap.dedent('''\
        import torch
        import horovod.torch as hvd


        def save_one(model, path):
            torch.save(model.state_dict(), path)


        def save_all(model, step):  # one checkpoint per step
            save_one(model, "ckpt-%d.pt" % step)


        def main():
            hvd.init()
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            for step in range(10):
                if hvd.local_rank() == 0:
                    save_all(model, step)


        if __name__ == "__main__":
            main()
        ''')
    assert [r for r in _rules(src) if r[0].startswith("checkpoint")] == [
        ("checkpoint-local-rank", _line(src, "    save_all(model, step)"), "warn")]


def test_helper_returning_a_built_dict_is_resolved():
    src = textwrap.dedent('''\
        import horovod.torch as hvd
        from torch.utils.data import DataLoader


        def loader_options(cuda):
            opts = {"batch_size": 64}
            if cuda:
                opts.update({"num_workers": 4, "pin_memory": True})
            return opts


        def main():
            hvd.init()
            return DataLoader(ds, sampler=s, **loader_options(True))


        if __name__ == "__main__":
            main()
        ''')
    assert [r for r in _rules(src) if r[0] == "dataloader-workers"] == [
        ("dataloader-workers", _line(src, "return DataLoader("), "warn")]


def test_per_rank_file_names_and_self_sharding_datasets_are_not_risks():
    per_rank = _edit('            if hvd.rank() == 0:\n                torch.save(model.state_dict(), "ckpt.pt")\n',
                     '            torch.save(model.state_dict(), f"ckpt-{hvd.rank()}.pt")\n')
    assert [r for r in _rules(per_rank) if r[0].startswith("checkpoint")] == []
    unsharded = _edit("        sampler = DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())\n"
                      "        loader = DataLoader(dataset, batch_size=32, sampler=sampler)\n",
                      "        loader = DataLoader(ShardedStream(), batch_size=32)\n")
    assert [r[0] for r in _rules(unsharded) if r[0] == "data-not-sharded"] == ["data-not-sharded"]
    stream = unsharded.replace("def main():", "class ShardedStream(torch.utils.data.IterableDataset):\n"
                               "    def __iter__(self):\n"
                               "        return iter(files[hvd.rank()::hvd.size()])\n\n\ndef main():")
    stream2 = unsharded.replace("def main():", "class ShardedStream(torch.utils.data.IterableDataset):\n"
                                "    def __iter__(self):\n"
                                "        part = hvd.rank()\n"
                                "        return read_part(part)\n\n\ndef main():")
    for ok in (stream, stream2):
        assert [r for r in _rules(ok) if r[0] == "data-not-sharded"] == []
