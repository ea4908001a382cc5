# SPDX-License-Identifier: MIT
"""Checks nadam.hpp's update against Keras' Nadam (the optimiser n3fit uses), on random gradients spanning ten decades,
with NNPDF4.0's learning rate and per-variable clipnorm. The update below transliterates train_replica_nadam's loop line
for line; Keras runs on three float64 variables of the network's first shapes. Needs TensorFlow (rabbit's venv has it):

    .venv-rabbit/bin/python examples/nnpdf/check_nadam.py

Prints the largest difference of the weights after 300 steps relative to how far they moved, and exits 1 above 1e-6.
Measured with TensorFlow 2.20: 4.9e-8, the rounding of the state Keras keeps in single precision.
"""
import sys

import numpy as np
import tensorflow as tf

rng = np.random.default_rng(1)
lr, clip, b1, b2, eps = 2.621e-3, 6.073e-6, 0.9, 0.999, 1e-7
shapes = [(25, 2), (25,), (20, 25)]
x0 = [rng.normal(size=s) for s in shapes]
grads = [[rng.normal(size=s) * 10 ** rng.uniform(-8, 2) for s in shapes] for _ in range(300)]

keras_vars = [tf.Variable(v) for v in x0]
opt = tf.keras.optimizers.Nadam(learning_rate=lr, clipnorm=clip, epsilon=eps)
for g in grads:
    opt.apply_gradients(zip([tf.constant(gi) for gi in g], keras_vars))
keras = [v.numpy() for v in keras_vars]

x = [v.copy() for v in x0]
m = [np.zeros_like(v) for v in x0]
v = [np.zeros_like(v) for v in x0]
u_product = 1.0
for t, g in enumerate(grads, start=1):
    g = [gi * min(1.0, clip / np.linalg.norm(gi)) for gi in g]
    u, u_next = b1 * (1 - 0.5 * 0.96**t), b1 * (1 - 0.5 * 0.96 ** (t + 1))
    u_product *= u
    u_product_next = u_product * u_next
    for i in range(len(x)):
        m[i] += (g[i] - m[i]) * (1 - b1)
        v[i] += (g[i] ** 2 - v[i]) * (1 - b2)
        m_hat = u_next * m[i] / (1 - u_product_next) + (1 - u) * g[i] / (1 - u_product)
        v_hat = v[i] / (1 - b2**t)
        x[i] -= lr * m_hat / (np.sqrt(v_hat) + eps)

moved = max(np.abs(a - b).max() for a, b in zip(x, x0))
diff = max(np.abs(a - b).max() for a, b in zip(x, keras)) / moved
print(f"TensorFlow {tf.__version__}: nadam.hpp's weights against Keras' after {len(grads)} steps, relative to the move: {diff:.2g}")
sys.exit(0 if diff < 1e-6 else 1)
