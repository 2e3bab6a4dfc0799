"""TensorFlow/Keras + Horovod: the framework's callbacks do the broadcast."""
import tensorflow as tf
import horovod.tensorflow.keras as hvd


def main():
    hvd.init()
    gpus = tf.config.experimental.list_physical_devices("GPU")
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    scaled_lr = 0.001 * hvd.size()
    opt = tf.keras.optimizers.Adam(learning_rate=scaled_lr)
    opt = hvd.DistributedOptimizer(opt)
    model.compile(loss="mse", optimizer=opt)
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
    ]
    if hvd.rank() == 0:
        callbacks.append(tf.keras.callbacks.ModelCheckpoint("./checkpoint-{epoch}.h5"))
    x = tf.random.normal((256, 8))
    y = tf.random.normal((256, 1))
    model.fit(x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()], epochs=3, callbacks=callbacks,
              verbose=1 if hvd.rank() == 0 else 0)
    if hvd.rank() == 0:
        model.save_weights("final.h5")


if __name__ == "__main__":
    main()
