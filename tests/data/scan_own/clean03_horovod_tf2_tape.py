"""Clean (no rule may warn): Horovod with a TensorFlow 2 custom loop.

Launch: horovodrun. DistributedGradientTape, broadcast of variables after the first step
(when they exist), SGD lr * hvd.size(), shard() by rank, tf.train.Checkpoint saved on rank 0.
"""
import tensorflow as tf
import horovod.tensorflow as hvd


def main():
    hvd.init()
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")

    x = tf.random.normal((4096, 16))
    y = tf.cast(tf.reduce_sum(x, axis=1) > 0, tf.int32)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank()).shuffle(1024).batch(64)

    model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(2)])
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.SGD(learning_rate=0.01 * hvd.size(), momentum=0.9)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=opt)

    @tf.function
    def training_step(features, labels, first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(features, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables(), root_rank=0)
        return loss

    for step, (features, labels) in enumerate(dataset.take(1000 // hvd.size())):
        loss = training_step(features, labels, step == 0)
        if step % 100 == 0 and hvd.rank() == 0:
            print(step, float(loss))
    if hvd.rank() == 0:
        checkpoint.save("./checkpoints/ckpt")


if __name__ == "__main__":
    main()
