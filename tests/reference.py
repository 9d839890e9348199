"""Plain NumPy (float64) implementations of every equation, written from the
papers and seeds independently of the library's code, for reference tests."""

import numpy as np


def softmax(x, mask=None, axis=-1):
    """Softmax over allowed entries; masked entries and fully masked rows -> 0."""
    x = np.asarray(x, np.float64)
    if mask is None:
        mask = np.ones_like(x, bool)
    mask = np.broadcast_to(mask, x.shape)
    shifted = np.where(mask, x, -np.inf)
    peak = np.max(shifted, axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    e = np.where(mask, np.exp(shifted - peak), 0.0)
    total = e.sum(axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def attend(scores, value, mask=None):
    """weights = softmax(scores) over allowed keys; output = weights @ value."""
    weights = softmax(scores, mask)
    return weights @ np.asarray(value, np.float64), weights


def dot_scores(q, k, scale=False):
    s = np.einsum("bqd,bkd->bqk", q, k)
    return s / np.sqrt(k.shape[-1]) if scale else s


def general_scores(q, k, W):
    # e_ij = q_i^T W k_j
    B, Tq, _ = q.shape
    out = np.zeros((B, Tq, k.shape[1]))
    for b in range(B):
        for i in range(Tq):
            for j in range(k.shape[1]):
                out[b, i, j] = q[b, i] @ W @ k[b, j]
    return out


def additive_scores(q, k, Wq, Wk, bias, v):
    # e_ij = v^T tanh(W_q q_i + W_k k_j + b)
    B, Tq, _ = q.shape
    out = np.zeros((B, Tq, k.shape[1]))
    for b in range(B):
        for i in range(Tq):
            for j in range(k.shape[1]):
                out[b, i, j] = v @ np.tanh(q[b, i] @ Wq + k[b, j] @ Wk + bias)
    return out


def concat_scores(q, k, kernels, biases, activation=np.tanh):
    # h0 = [k_j; q_i], h_l = f(h_{l-1} W_l + b_l), e = h_L w_o + b_o
    B, Tq, _ = q.shape
    out = np.zeros((B, Tq, k.shape[1]))
    for b in range(B):
        for i in range(Tq):
            for j in range(k.shape[1]):
                h = np.concatenate([k[b, j], q[b, i]])
                for W, c in zip(kernels[:-1], biases[:-1]):
                    h = activation(h @ W + c)
                out[b, i, j] = (h @ kernels[-1] + biases[-1])[0]
    return out


def local_window(mode, window, Tq, Tv, lengths, centres=None):
    """Boolean (B, Tq, Tv) window of LocalAttention."""
    B = len(lengths)
    mask = np.zeros((B, Tq, Tv), bool)
    for b in range(B):
        for i in range(Tq):
            for j in range(Tv):
                if mode == "last":
                    mask[b, i, j] = lengths[b] - window <= j
                else:
                    mask[b, i, j] = abs(j - centres[b, i]) <= window
    return mask


def multi_head(query, key, value, w, mask=None):
    """w: dict of query/key/value kernels (D, H, d), biases (H, d), output
    kernel (H, dv, Do) and bias (Do,). Returns (output, weights (B,H,Tq,Tv))."""
    heads = []
    weights = []
    H = w["query_kernel"].shape[1]
    for h in range(H):
        q = query @ w["query_kernel"][:, h] + w["query_bias"][h]
        k = key @ w["key_kernel"][:, h] + w["key_bias"][h]
        v = value @ w["value_kernel"][:, h] + w["value_bias"][h]
        o, a = attend(dot_scores(q, k, scale=True), v, mask)
        heads.append(o)
        weights.append(a)
    concat = np.concatenate(heads, -1)  # Concat(head_1..head_H)
    W_o = w["output_kernel"].reshape(-1, w["output_kernel"].shape[-1])
    return concat @ W_o + w["output_bias"], np.stack(weights, 1)


def rope(x, positions, base=10000.0):
    """RoPE with rotate-half pairs (i, i + d/2): each pair turned by the
    angle p·base^(-2i/d). x: (T, d), positions: (T,)."""
    out = np.array(x, np.float64)
    d = x.shape[-1]
    for t, p in enumerate(positions):
        for i in range(d // 2):
            angle = p * base ** (-2 * i / d)
            a, b = x[t, i], x[t, i + d // 2]
            out[t, i] = a * np.cos(angle) - b * np.sin(angle)
            out[t, i + d // 2] = b * np.cos(angle) + a * np.sin(angle)
    return out


def multi_head_variant(
    query,
    key,
    value,
    w,
    mask=None,
    kv_heads=None,
    position=None,
    slopes=None,
    relative_key=None,
    relative_value=None,
    window=None,
):
    """`multi_head` with the issue-14 variants, head by head: query head h
    reads key/value head h // (H / kv_heads); position "rope" rotates q and
    k, "alibi" adds -slopes[h]·|i - j|, "relative" (Shaw) adds q·a^K_ij to
    the score and a^V_ij to the values, the tables indexed by
    clip(j - i, -k, k) + k; `window` keeps |i - j| < window (Keras's
    `sliding_window`). Positions
    are 0..T-1. Returns (output, weights (B, H, Tq, Tv))."""
    H = w["query_kernel"].shape[1]
    groups = H // (kv_heads or H)
    B, Tq, Tv = query.shape[0], query.shape[1], key.shape[1]
    i, j = np.arange(Tq)[:, None], np.arange(Tv)[None, :]
    full = np.ones((B, Tq, Tv), bool) if mask is None else np.broadcast_to(mask, (B, Tq, Tv))
    if window is not None:
        full = full & (np.abs(i - j) < window)[None]
    heads, weights = [], []
    for h in range(H):
        g = h // groups
        q = query @ w["query_kernel"][:, h] + w["query_bias"][h]  # (B, Tq, d)
        k = key @ w["key_kernel"][:, g] + w["key_bias"][g]
        v = value @ w["value_kernel"][:, g] + w["value_bias"][g]
        if position == "rope":
            q = np.stack([rope(qb, np.arange(Tq)) for qb in q])
            k = np.stack([rope(kb, np.arange(Tv)) for kb in k])
        d = q.shape[-1]
        scores = np.einsum("bqd,bkd->bqk", q, k) / np.sqrt(d)
        if position == "alibi":
            scores = scores - slopes[h] * np.abs(i - j)[None]
        if position == "relative":
            r = (relative_key.shape[0] - 1) // 2
            index = np.clip(j - i, -r, r) + r  # (Tq, Tv)
            scores = scores + np.einsum("bqd,qkd->bqk", q, relative_key[index]) / np.sqrt(d)
        a = softmax(scores, full)
        o = a @ v
        if position == "relative" and relative_value is not None:
            o = o + np.einsum("bqk,qkd->bqd", a, relative_value[index])
        heads.append(o)
        weights.append(a)
    concat = np.concatenate(heads, -1)
    W_o = w["output_kernel"].reshape(-1, w["output_kernel"].shape[-1])
    return concat @ W_o + w["output_bias"], np.stack(weights, 1)


def sinusoidal(length, d, start=0):
    pe = np.zeros((length, d))
    for pos in range(length):
        for dim in range(d):
            i = dim // 2
            angle = (pos + start) / 10000 ** (2 * i / d)
            pe[pos, dim] = np.sin(angle) if dim % 2 == 0 else np.cos(angle)
    return pe


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta


def feed_forward(x, W1, b1, W2, b2):
    return np.maximum(0.0, x @ W1 + b1) @ W2 + b2  # max(0, xW1 + b1)W2 + b2


def causal(T):
    return np.tril(np.ones((T, T), bool))


def glu_conv(x, kernel, bias, left, right, residual=None, mask=None):
    """ConvS2S block: zero padded positions, pad (left, right), W [x_{i..i+k-1}] + b,
    GLU A ⊗ σ(B), then (v + residual) · sqrt(0.5). `residual` is None (no
    residual), "identity" or a (kernel, bias) projection."""
    if mask is not None:
        x = x * mask[..., None]
    B, T, _ = x.shape
    k = kernel.shape[0]
    padded = np.concatenate(
        [np.zeros((B, left, x.shape[2])), x, np.zeros((B, right, x.shape[2]))], 1
    )
    y = np.zeros((B, T, kernel.shape[2]))
    for t in range(T):
        window = padded[:, t : t + k].reshape(B, -1)  # [h_{i-k/2} ... h_{i+k/2}]
        y[:, t] = window @ kernel.reshape(-1, kernel.shape[2]) + bias
    a, b = np.split(y, 2, axis=-1)
    v = a / (1 + np.exp(-b))
    if residual is None:
        return v
    res = x if residual == "identity" else x @ residual[0] + residual[1]
    return (v + res) * np.sqrt(0.5)


def multi_step_attention(h, g, z, values, Wd, bd, mask=None, Wc=None, bc=None):
    """d = W_d h + b_d + g; a = softmax(d · z); c = sum a (z + e) · m sqrt(1/m);
    output = (h + [W_c] c) · sqrt(0.5)."""
    d = h @ Wd + bd + g
    scores = np.einsum("bte,bse->bts", d, z)
    weights = softmax(scores, None if mask is None else mask[:, None, :])
    c = weights @ values
    m = (
        np.full((h.shape[0], 1, 1), z.shape[1], float)
        if mask is None
        else mask.sum(1)[:, None, None]
    )
    c = c * m * np.sqrt(1.0 / m)
    if Wc is not None:
        c = c @ Wc + bc
    return (h + c) * np.sqrt(0.5), weights


def bilinear_sample(image, x, y, padding="zeros"):
    """The seed's V_i^c = Σ_n Σ_m U_nm^c max(0, 1-|x_i-m|) max(0, 1-|y_i-n|),
    summed literally over every pixel; x, y in pixel units, (B, P)."""
    B, H, W, C = image.shape
    if padding == "border":
        x, y = np.clip(x, 0, W - 1), np.clip(y, 0, H - 1)
    m = np.arange(W)[None, None, :]
    n = np.arange(H)[None, None, :]
    wx = np.maximum(0.0, 1.0 - np.abs(x[..., None] - m))  # (B, P, W)
    wy = np.maximum(0.0, 1.0 - np.abs(y[..., None] - n))  # (B, P, H)
    return np.einsum("bph,bpw,bhwc->bpc", wy, wx, image)


def bilinear_grad_x(image, x, y):
    """The seed's ∂V/∂x_i = Σ_n Σ_m U_nm max(0, 1-|y-n|) · {0 if |m-x| >= 1;
    1 if m >= x; -1 if m < x}, (B, P, C)."""
    B, H, W, C = image.shape
    m = np.arange(W)[None, None, :]
    n = np.arange(H)[None, None, :]
    sign = np.where(np.abs(m - x[..., None]) >= 1, 0.0, np.where(m >= x[..., None], 1.0, -1.0))
    wy = np.maximum(0.0, 1.0 - np.abs(y[..., None] - n))
    return np.einsum("bph,bpw,bhwc->bpc", wy, sign, image)
