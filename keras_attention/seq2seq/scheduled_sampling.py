"""Scheduled sampling (Bengio et al., 2015): during training, feed the
decoder its own previous output instead of the ground truth with a
probability p that grows over training, so that it learns to recover from
its own mistakes (the exposure bias of pure teacher forcing).

    ỹ_{t} = draw(p_model(· | ỹ_<t, x))   with probability p(step)
          = y_{t}                        otherwise
    logits_{t+1} = decoder(ỹ_t, state_t)

`Seq2Seq.call(..., training=True)` does this when the model has a
`ScheduledSampling`, so Keras's own `fit` trains it on every backend.
"""

import keras
from keras import ops

from keras_attention.masking import write_at
from keras_attention.seq2seq.decoding_options import never_generated
from keras_attention.validation import (
    check_choice,
    check_finite,
    check_positive_int,
    is_number,
)


@keras.saving.register_keras_serializable(package="keras_attention")
class ScheduledSampling:
    """The probability p(step) of feeding the decoder its own output.

    - "constant": p = `probability`.
    - "linear": p rises from `start` to `end` over `steps` steps.
    - "inverse_sigmoid": p = 1 - k / (k + exp(step / k)), rising from about
      0 towards 1 (the paper's ε_i = k / (k + exp(i/k)) is 1 - p).

    Args:
        schedule: "constant", "linear" or "inverse_sigmoid".
        probability: p of the constant schedule.
        start, end, steps: the linear schedule.
        k: the inverse sigmoid's k > 0.
        draw: "sample" (draw from the softmax, as the paper does) or
            "argmax".
        seed: int seed of the draws.

    Call arguments:
        step: int (or int tensor), the training step.

    Returns:
        float32 scalar p.

    Example:

    >>> schedule = ScheduledSampling("linear", start=0.0, end=0.5, steps=100)
    >>> round(float(schedule(50)), 3)
    0.25

    References:
        Bengio et al., "Scheduled Sampling for Sequence Prediction with
        Recurrent Neural Networks" (2015).
    """

    def __init__(
        self,
        schedule="constant",
        probability=0.25,
        start=0.0,
        end=0.5,
        steps=10000,
        k=1000.0,
        draw="sample",
        seed=None,
    ):
        owner = "ScheduledSampling"
        check_choice("schedule", schedule, ("constant", "linear", "inverse_sigmoid"), owner)
        check_choice("draw", draw, ("sample", "argmax"), owner)
        for name, value in (("probability", probability), ("start", start), ("end", end)):
            if not is_number(value) or not 0.0 <= value <= 1.0:
                raise ValueError(
                    f"`{name}` of ScheduledSampling must be in [0, 1]; received {name}={value!r}."
                )
        probability, start, end = float(probability), float(start), float(end)
        steps = check_positive_int("steps", steps, owner)
        k = check_finite("k", k, owner, low=0.0, expected="a finite number > 0")
        self.schedule, self.probability, self.start, self.end = schedule, probability, start, end
        self.steps, self.k, self.draw, self.seed = steps, k, draw, seed

    def __call__(self, step):
        step = ops.cast(step, "float32")
        if self.schedule == "constant":
            return ops.convert_to_tensor(self.probability, "float32")
        if self.schedule == "linear":
            fraction = ops.minimum(step / float(self.steps), 1.0)
            return self.start + (self.end - self.start) * fraction
        # exp overflows float32 past ~88: cap the exponent (p is 1 there anyway).
        return 1.0 - self.k / (self.k + ops.exp(ops.minimum(step / self.k, 80.0)))

    def get_config(self):
        return {
            "schedule": self.schedule,
            "probability": self.probability,
            "start": self.start,
            "end": self.end,
            "steps": self.steps,
            "k": self.k,
            "draw": self.draw,
            "seed": self.seed,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def scheduled_sampling_logits(
    model, source, target_in, probability, draw="sample", seed=None, training=None
):
    """Decode `target_in` step by step, feeding at step t+1, with
    probability p, the token drawn from the model's own output at step t
    instead of the ground truth `target_in[:, t+1]`. p = 0 is teacher
    forcing, p = 1 free running.

    Args:
        model: a `Seq2Seq` (anything with `encode` and `decode_step`).
        source: int `(B, S)`; target_in: int `(B, T)`.
        probability: float scalar p.
        draw: "sample" or "argmax".
        seed: a `keras.random.SeedGenerator` (stateless-safe under JAX's
            jit when it belongs to the model) or an int.
        training: passed to the model.

    Returns:
        logits `(B, T, V)`.
    """
    source = ops.convert_to_tensor(source)
    target_in = ops.cast(ops.convert_to_tensor(target_in), "int32")
    static_length = target_in.shape[1]
    state = model.encode(source, max_length=static_length, training=training)
    batch = ops.shape(target_in)[0]
    probability = ops.cast(probability, "float32")

    def next_tokens(logits, t):
        logits = never_generated(logits, model.sos_id, model.padding_id)
        if draw == "argmax":
            drawn = ops.argmax(logits, axis=-1)
        else:
            drawn = keras.random.categorical(ops.cast(logits, "float32"), 1, seed=seed)[:, 0]
        use_model = keras.random.uniform((batch,), seed=seed) < probability
        return ops.where(use_model, ops.cast(drawn, "int32"), ops.take(target_in, t, axis=1))

    logits, state, _ = model.decode_step(target_in[:, 0], state, training=training)
    if static_length is not None:
        # A known length (the usual padded batch): unroll, so each step is
        # a plain op in the graph.
        outputs = [logits]
        for t in range(1, static_length):
            logits, state, _ = model.decode_step(next_tokens(logits, t), state, training=training)
            outputs.append(logits)
        return ops.stack(outputs, axis=1)

    # An unknown length (tf.data with padded_batch): a while_loop that
    # writes each step with `write_at`, which keeps gradients flowing.
    length = ops.shape(target_in)[1]
    outputs = write_at(
        ops.zeros((batch, length, ops.shape(logits)[-1]), logits.dtype), logits[:, None], 0, axis=1
    )

    def body(t, logits, state, outputs):
        logits, state, _ = model.decode_step(next_tokens(logits, t), state, training=training)
        return t + 1, logits, state, write_at(outputs, logits[:, None], t, axis=1)

    _, _, _, outputs = ops.while_loop(lambda t, *_: t < length, body, (1, logits, state, outputs))
    return outputs
