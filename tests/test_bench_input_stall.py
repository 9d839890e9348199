"""`bench/input_stall.py`: the in-memory system holds the very batches the
shard system reads first, and a pass reports its steps' and its own time."""

import numpy as np
import tensorflow as tf

from tests.bench_helpers import load_bench


def batches(dataset):
    return [[np.asarray(part) for part in element] for element in dataset]


def test_memory_holds_the_first_batches_read_once():
    stall = load_bench("input_stall")
    # Batches of differing shapes, in a new order on every pass (reshuffled):
    # a copy that read the source again would differ between passes.
    source = tf.data.Dataset.range(12).shuffle(12, seed=3, reshuffle_each_iteration=True)
    source = source.map(lambda i: (tf.fill([i % 3 + 1, 2], i), tf.fill([i % 3 + 1], -i)))
    held = stall.in_memory(source, 5)
    first, second = batches(held), batches(held)
    assert len(first) == 5
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    assert {a[0].shape for a in first} <= {(1, 2), (2, 2), (3, 2)}


def test_one_pass_times_every_step_but_the_first():
    import keras

    stall = load_bench("input_stall")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    data = tf.data.Dataset.from_tensor_slices((np.ones((8, 3)), np.zeros((8, 1)))).batch(2)
    step, elapsed = stall.one_pass(model, data.repeat(), 4)
    # A gap between two batch ends lies within the pass.
    assert 0 < step < elapsed


def test_held_holds_the_first_batches_of_a_py_dataset_read_once():
    import keras

    stall = load_bench("input_stall")

    class Counting(keras.utils.PyDataset):
        def __init__(self):
            super().__init__()
            self.reads = []

        @property
        def num_batches(self):
            return 10

        def __getitem__(self, index):
            self.reads.append(index)
            return np.full((2, 1), index, "float32"), np.zeros((2, 1), "float32")

    source = Counting()
    held = stall.Held(source, 3)
    assert held.num_batches == 3 and source.reads == [0, 1, 2]
    assert [float(held[index][0][0, 0]) for index in range(3)] == [0.0, 1.0, 2.0]
    assert source.reads == [0, 1, 2]  # read once, when held
