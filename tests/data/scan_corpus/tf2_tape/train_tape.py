"""TensorFlow 2 custom loop + Horovod: DistributedGradientTape and broadcast_variables."""
import tensorflow as tf
import horovod.tensorflow as hvd

hvd.init()
gpus = tf.config.experimental.list_physical_devices("GPU")
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
opt = tf.optimizers.SGD(0.01 * hvd.size())
checkpoint = tf.train.Checkpoint(model=model, optimizer=opt)


@tf.function
def training_step(x, y, first_batch):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables(), root_rank=0)
    return loss


for step in range(100):
    loss = training_step(tf.random.normal((32, 8)), tf.random.normal((32, 1)), step == 0)
    if step % 10 == 0 and hvd.rank() == 0:
        checkpoint.save("./checkpoints/ckpt")
