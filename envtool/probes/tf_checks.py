"""Probe helpers: Horovod's TensorFlow and Keras bindings checked on one rank (standalone).

Not run by itself: imported by the rank probe (``envtool/validate/rank_probe.py``, which envtool
copies beside this file into a validation run directory) and by the allreduce probe
(``allreduce.py``, in this directory), each running under a launcher with the environment's own
interpreter. Only the standard library at module level; ``tensorflow``, ``numpy`` and Horovod's
bindings are passed in or imported inside the functions.

The checks follow the pattern Horovod's own Keras example and ALCF's Horovod tutorial teach
(horovod/horovod@v0.28.1:examples/tensorflow2/tensorflow2_keras_mnist.py;
https://github.com/argonne-lcf/ai-science-training-series, "Distributed training with Horovod"):
the optimizer wrapped in ``hvd.DistributedOptimizer``, the initial variables broadcast from rank
0 by ``hvd.callbacks.BroadcastGlobalVariablesCallback(0)``, each rank training on its own shard.

Each function returns one check's record, a JSON-ready dict with ``ok`` (bool) and ``error``
(str or None), the same shape as the rank probe's PyTorch checks.
"""
import hashlib
import time

#: The modules a TensorFlow rank imports, in order: the framework, Horovod's TensorFlow binding,
#: and its Keras binding (``horovod.tensorflow.keras``, for ``tf.keras``).
MODULES = ("tensorflow", "horovod.tensorflow", "horovod.tensorflow.keras")
#: Timed repetitions of the 4-byte allreduce (``latency_us``), as the rank probe's PyTorch check.
LATENCY_REPS = 20
#: Samples on each rank for the Keras check, and its batch size and epochs.
KERAS_SAMPLES = 64
KERAS_BATCH = 16
KERAS_EPOCHS = 2


def eager(tf):
    """Switch a TensorFlow 1.x to eager execution (``tf.compat.v1.enable_eager_execution``, TF >= 1.13;
    it must come before any operation is made), so the checks below run as in TensorFlow 2.
    Returns None when eager execution is on, else why it is not (str)."""
    if tf.executing_eagerly():
        return None
    enable = getattr(getattr(getattr(tf, "compat", None), "v1", None), "enable_eager_execution", None)
    if enable is None:
        return "TensorFlow %s has no eager execution (tf.compat.v1.enable_eager_execution)" % tf.__version__
    enable()
    return None if tf.executing_eagerly() else "eager execution could not be enabled"


def pin_gpu(tf, local_rank):
    """One GPU per rank, as Horovod's TensorFlow 2 examples do
    (horovod/horovod@v0.28.1:examples/tensorflow2/tensorflow2_keras_mnist.py): memory growth on, and
    only the GPU ``local_rank % count`` visible. Returns that GPU's name, or None without GPUs (or
    a TensorFlow without ``tf.config``)."""
    config = getattr(tf, "config", None)
    if config is None or not hasattr(config, "list_physical_devices"):
        return None
    gpus = config.list_physical_devices("GPU")
    if not gpus:
        return None
    for gpu in gpus:
        config.experimental.set_memory_growth(gpu, True)
    mine = gpus[local_rank % len(gpus)]
    config.set_visible_devices(mine, "GPU")
    return mine.name


def allreduce_check(hvd, tf, label="tf.cpu"):
    """Average ``rank + 1`` over every rank through ``horovod.tensorflow``, with the tensor on the
    CPU (``tf.device("/cpu:0")``); must be ``(size + 1) / 2``.

    Args:
        hvd: ``horovod.tensorflow`` (initialised).
        tf: ``tensorflow``.
        label: the tensor names' suffix (Horovod matches collectives across ranks by name).
    Returns:
        ``{"ok", "value", "expected", "error"}`` and, when ok, ``latency_us``: the mean time of one
        such 4-byte allreduce over :data:`LATENCY_REPS`, in microseconds.
    """
    with tf.device("/cpu:0"):
        t = tf.constant([float(hvd.rank() + 1)])
        got = float(hvd.allreduce(t, name="envtool.probe." + label).numpy()[0])
    expected = (hvd.size() + 1) / 2.0
    ok = abs(got - expected) < 1e-6
    out = {"ok": ok, "value": got, "expected": expected,
           "error": None if ok else "got %s, expected %s" % (got, expected)}
    if ok:
        with tf.device("/cpu:0"):
            hvd.allreduce(t, name="envtool.probe.%s.warm" % label)
            started = time.perf_counter()
            for i in range(LATENCY_REPS):
                hvd.allreduce(t, name="envtool.probe.%s.lat%d" % (label, i))
        out["latency_us"] = round((time.perf_counter() - started) / LATENCY_REPS * 1e6, 3)
    return out


def _flat(np, model):
    """Every weight of ``model`` as one float64 vector (numpy)."""
    return np.concatenate([np.asarray(w, dtype=np.float64).ravel() for w in model.get_weights()])


def keras_fit_check(hvdk, tf, np):
    """A short ``model.fit`` on every rank; afterwards the weights must be equal on every rank.

    Each rank seeds its initial weights and its data shard with its own rank, so the ranks start
    different: only the broadcast of rank 0's variables
    (``BroadcastGlobalVariablesCallback(0)``) and the averaged gradients
    (``DistributedOptimizer``) make them agree. After ``fit``, rank 0's weights are broadcast and
    compared with this rank's.

    Args:
        hvdk: ``horovod.tensorflow.keras`` (initialised).
        tf: ``tensorflow``; np: ``numpy``.
    Returns:
        ``{"ok", "error", "max_difference"`` (largest absolute difference from rank 0's weights
        after fit), ``"trained"`` (the weights moved from the broadcast ones), ``"weights_sha256"``
        (of the float64 weights), ``"loss"`` (last epoch's),
        ``"seconds"``, ``"optimizer"``}``.
    """
    rank, size = hvdk.rank(), hvdk.size()
    started = time.monotonic()
    tf.random.set_seed(1000 + rank)
    rng = np.random.RandomState(rank)  # numpy < 1.17 has no default_rng
    x = rng.normal(size=(KERAS_SAMPLES, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(4,)),
                                 tf.keras.layers.Dense(1)])
    legacy = getattr(getattr(tf.keras.optimizers, "legacy", None), "SGD", None)
    sgd = (legacy or tf.keras.optimizers.SGD)(learning_rate=0.01 * size)
    opt = hvdk.DistributedOptimizer(sgd)
    model.compile(loss="mse", optimizer=opt)
    start = hvdk.broadcast(tf.constant(_flat(np, model)), root_rank=0, name="envtool.keras.initial").numpy()
    hist = model.fit(x, y, batch_size=KERAS_BATCH, epochs=KERAS_EPOCHS, verbose=0, shuffle=False,
                     callbacks=[hvdk.callbacks.BroadcastGlobalVariablesCallback(0)])
    mine = _flat(np, model)
    reference = hvdk.broadcast(tf.constant(mine), root_rank=0, name="envtool.keras.weights").numpy()
    diff = float(np.max(np.abs(mine - reference))) if mine.size else 0.0
    trained = bool(np.any(mine != start)) if mine.size else False
    ok = diff <= 1e-6 and trained
    error = None
    if diff > 1e-6:
        error = ("after model.fit the weights differ from rank 0's by up to %.3g (the broadcast of the initial "
                 "variables or the gradient averaging did not happen)" % diff)
    elif not trained:
        error = "model.fit left every weight where rank 0 started (no training step ran)"
    return {"ok": ok, "error": error, "max_difference": diff, "trained": trained,
            "weights_sha256": hashlib.sha256(mine.tobytes()).hexdigest(),
            "loss": float(hist.history["loss"][-1]), "seconds": round(time.monotonic() - started, 3),
            "optimizer": type(sgd).__module__ + "." + type(sgd).__name__}


def keras_benchmark(hvdk, tf, batch_size, steps):
    """Samples/s of this rank for a small Keras CNN on a fixed random batch (3x32x32 channels-last,
    10 classes), the same network as the rank probe's PyTorch benchmark: Horovod's synthetic
    benchmark pattern (horovod/horovod@v0.28.1:examples/tensorflow2/tensorflow2_synthetic_benchmark.py).

    Args:
        hvdk: ``horovod.tensorflow.keras`` (initialised); tf: ``tensorflow``.
        batch_size: samples per step; steps: timed steps (after ``max(2, steps // 5)`` warm-up ones).
    Returns:
        ``{"ok", "batch_size", "steps", "seconds", "samples_per_sec", "device", "framework"}``.
    """
    tf.random.set_seed(0)
    layers = tf.keras.layers
    model = tf.keras.Sequential([layers.Conv2D(16, 3, padding="same", activation="relu", input_shape=(32, 32, 3)),
                                 layers.MaxPooling2D(2), layers.Conv2D(32, 3, padding="same", activation="relu"),
                                 layers.MaxPooling2D(2), layers.Flatten(), layers.Dense(10)])
    legacy = getattr(getattr(tf.keras.optimizers, "legacy", None), "SGD", None)
    opt = hvdk.DistributedOptimizer((legacy or tf.keras.optimizers.SGD)(learning_rate=0.01 * hvdk.size()))
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), optimizer=opt)
    data = tf.random.normal((batch_size, 32, 32, 3))
    target = tf.random.uniform((batch_size,), maxval=10, dtype=tf.int64)
    for _ in range(max(2, steps // 5)):
        model.train_on_batch(data, target)
    started = time.monotonic()
    for _ in range(steps):
        model.train_on_batch(data, target)
    seconds = time.monotonic() - started
    gpus = tf.config.get_visible_devices("GPU") if hasattr(tf.config, "get_visible_devices") else []
    return {"ok": True, "batch_size": batch_size, "steps": steps, "seconds": round(seconds, 4),
            "samples_per_sec": batch_size * steps / seconds, "device": gpus[0].name if gpus else "cpu",
            "framework": "tensorflow"}


class NumpyOps(object):
    """The array operations the rank probe's allreduce sweep needs, with numpy arrays, for a
    framework whose allreduce takes and returns something numpy converts (TensorFlow's)."""

    def __init__(self, np):
        self.np = np

    def arange(self, count):
        """``0 … count-1`` as int64."""
        return self.np.arange(count, dtype=self.np.int64)

    def float32(self, a):
        """``a`` as float32."""
        return a.astype(self.np.float32)

    def equal(self, a, b):
        """Bit-exact equality of two arrays (bool)."""
        return bool(self.np.array_equal(self.np.asarray(a), self.np.asarray(b)))

    def wrong(self, a, b):
        """How many elements differ (int)."""
        return int((self.np.asarray(a) != self.np.asarray(b)).sum())

    def scalar(self, value):
        """A 1-element float32 array."""
        return self.np.array([value], dtype=self.np.float32)

    def first(self, a):
        """The first element as float."""
        return float(self.np.asarray(a).ravel()[0])

    def sync(self):
        """Nothing to wait for on the CPU."""
