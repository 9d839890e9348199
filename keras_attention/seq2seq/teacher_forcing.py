"""Teacher forcing: the decoder reads the ground truth shifted right.

    target_in  = [<sos>, y_1, ..., y_T]
    target_out = [y_1, ..., y_T, <eos>]
    logits     = model((source, target_in))          all T+1 steps at once
    loss       = MaskedCrossEntropy()(target_out, logits)

Every `Seq2Seq` family computes `p(y_t | y_<t, x)` for every t in one pass
this way (`model.teacher_forced`); generation feeds the model its own
output instead, and scheduled sampling (`scheduled_sampling.py`) mixes the
two during training.
"""

from keras import ops


def teacher_forcing_pairs(target, sos_id=1, eos_id=2, padding_id=0):
    """`(target_in, target_out)` from unframed target ids.

    Args:
        target: int `(B, T)` target ids without `<sos>`/`<eos>`, padded with
            `padding_id` after each row's last token.
        sos_id, eos_id, padding_id: the special ids.

    Returns:
        Two int32 `(B, T + 1)` tensors: `<sos>` then the row, and the row
        then `<eos>` (written right after each row's last real token).

    Example:

    >>> target_in, target_out = teacher_forcing_pairs(np.array([[7, 8, 0], [9, 0, 0]]))
    >>> np.asarray(target_in).tolist()
    [[1, 7, 8, 0], [1, 9, 0, 0]]
    >>> np.asarray(target_out).tolist()
    [[7, 8, 2, 0], [9, 2, 0, 0]]
    """
    target = ops.cast(target, "int32")
    batch = ops.shape(target)[0]
    padded = ops.concatenate([target, ops.full((batch, 1), padding_id, "int32")], axis=1)
    lengths = ops.sum(ops.cast(ops.not_equal(target, padding_id), "int32"), axis=1)  # (B,)
    positions = ops.arange(ops.shape(padded)[1])[None, :]  # (1, T + 1)
    target_out = ops.where(positions == lengths[:, None], eos_id, padded)
    target_in = ops.concatenate([ops.full((batch, 1), sos_id, "int32"), target], axis=1)
    return target_in, target_out
