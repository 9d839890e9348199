"""The hand-worked examples of seed 000 (Sequence to Sequence Networks and
Attention), reproduced by the layers."""

import numpy as np

from keras_attention import DotProductAttention, MultiHead

# Keys/values A¹(T): one column per encoder state; the query a²(t-1).
KEYS = np.array([[0.7, -0.6, 0.2, -0.8], [0.3, 0.5, -0.7, -0.5], [-0.6, 0.1, 0.6, 0.4]])
QUERY = np.array([0.4, 0.1, -0.3])


def test_dot_product_example():
    layer = DotProductAttention()
    states = KEYS.T[None].astype("float32")  # (1, Tv=4, D=3): rows are a¹(t)
    output, weights = layer(QUERY[None].astype("float32"), states, return_attention_scores=True)
    # a⁴(t) = softmax(n⁴(t)), with n⁴(t) = [0.49, -0.22, -0.17, -0.49]
    # The seed prints 3 decimals; its 0.420 is 0.419497 rounded via 0.4195,
    # hence half a unit of the 3rd decimal plus that double rounding.
    np.testing.assert_allclose(np.asarray(weights)[0], [0.420, 0.206, 0.217, 0.157], atol=6e-4)
    exact = np.exp([0.49, -0.22, -0.17, -0.49]) / np.exp([0.49, -0.22, -0.17, -0.49]).sum()
    np.testing.assert_allclose(np.asarray(weights)[0], exact, atol=1e-6)
    # a⁵(t) = A¹(T) a⁴(t)
    np.testing.assert_allclose(np.asarray(output)[0], [0.087, -0.002, -0.038], atol=1e-3)


def _self_attention_weights():
    # Rows of the seed's matrices: W^Q, W^K, W^V map a 3-vector to a 2-vector.
    WQ = np.array([[1, 1, 0], [0, 0, 1]], float)
    WK = np.array([[0, 1, 0], [1, 0, 1]], float)
    WV = np.array([[0, 1, 1], [1, 0, 1]], float)
    P = np.array([[1, 0], [0, 2], [1, 0]], float)  # columns p(1), p(2)
    return WQ, WK, WV, P


def test_self_attention_example_multi_head():
    WQ, WK, WV, P = _self_attention_weights()
    layer = MultiHead(num_heads=1, key_dim=2, output_dim=2, use_bias=False)
    x = P.T[None].astype("float32")  # (1, T=2, D=3)
    layer(x, x)
    layer.query_kernel.assign(WQ.T[:, None, :])  # (D, H, d_k): x W^Qᵀ = (W^Q p)ᵀ
    layer.key_kernel.assign(WK.T[:, None, :])
    layer.value_kernel.assign(WV.T[:, None, :])
    layer.output_kernel.assign(np.eye(2)[None])  # W^O = I shows the head itself
    output, weights = layer(x, x, return_attention_scores=True)
    output, weights = np.asarray(output)[0], np.asarray(weights)[0, 0]

    # A^A = softmax(N^A, columns), N^A = [[√2, 0], [√2, 2√2]]: weights[i, j]
    # is the weight of key j for query i, i.e. A^A transposed.
    np.testing.assert_allclose(weights.T, [[0.5, 0.06], [0.5, 0.94]], atol=5e-3)
    exact = 1 / (1 + np.exp(2 * np.sqrt(2)))
    np.testing.assert_allclose(weights[1], [exact, 1 - exact], atol=1e-6)
    # A^O = A^V A^A = [[1.5, 1.94], [1, 0.12]] (columns are positions; the
    # seed rounds the weights to 0.06/0.94 before multiplying).
    np.testing.assert_allclose(output.T, [[1.5, 1.94], [1.0, 0.12]], atol=1e-2)
    np.testing.assert_allclose(output[1], [2 - exact, 2 * exact], atol=1e-5)


def test_self_attention_example_scaled_dot_product():
    WQ, WK, WV, P = _self_attention_weights()
    AQ, AK, AV = (W @ P for W in (WQ, WK, WV))  # 2 x 2, columns = positions
    layer = DotProductAttention(scale=True)
    output = layer(
        AQ.T[None].astype("float32"), AV.T[None].astype("float32"), key=AK.T[None].astype("float32")
    )
    np.testing.assert_allclose(np.asarray(output)[0].T, [[1.5, 1.94], [1.0, 0.12]], atol=1e-2)
