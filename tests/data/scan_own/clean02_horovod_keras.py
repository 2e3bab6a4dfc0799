"""Clean (no rule may warn): Horovod with tf.keras (TensorFlow 2).

Launch: horovodrun. Pinning with set_visible_devices(gpus[hvd.local_rank()]), dataset shard()
by rank, Adam lr * hvd.size(), hvd.DistributedOptimizer, BroadcastGlobalVariablesCallback,
MetricAverageCallback, ModelCheckpoint only on rank 0.
"""
import tensorflow as tf
import horovod.tensorflow.keras as hvd


def make_dataset(batch_size):
    """Synthetic data, split between ranks with shard()."""
    x = tf.random.normal((4096, 16))
    y = tf.cast(tf.reduce_sum(x, axis=1) > 0, tf.int32)
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    return ds.shard(hvd.size(), hvd.rank()).shuffle(1024).batch(batch_size).repeat()


def main():
    hvd.init()
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")

    model = tf.keras.Sequential([
        tf.keras.layers.Dense(32, activation="relu", input_shape=(16,)),
        tf.keras.layers.Dense(2),
    ])
    opt = tf.keras.optimizers.Adam(learning_rate=0.001 * hvd.size())
    opt = hvd.DistributedOptimizer(opt)
    model.compile(optimizer=opt, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
    ]
    if hvd.rank() == 0:
        callbacks.append(tf.keras.callbacks.ModelCheckpoint("checkpoint-{epoch}.h5"))
    model.fit(make_dataset(64), steps_per_epoch=500 // hvd.size(), epochs=3, callbacks=callbacks,
              verbose=1 if hvd.rank() == 0 else 0)


if __name__ == "__main__":
    main()
