"""The peers of `bench/decoding.py`, run in their own virtualenv (torch,
transformers, ctranslate2; see `make bench-decoding`): Hugging Face
`MarianMTModel.generate` (PyTorch, CPU) and CTranslate2 (fp32 and int8)
converted from that same model, with random weights and the dimensions
`bench/decoding.py` gives.

A worker: it reads one JSON request per line on stdin and answers one JSON
line on stdout, so the benchmark can alternate it with its own systems.

    {"op": "time", "system": "hf" | "ct2-fp32" | "ct2-int8",
     "search": "greedy" | "beam4", "batch": 32, "iters": 1}
        -> {"calls": [seconds of each call]}
    {"op": "quit"}

Every call generates exactly `--length` tokens per row (Hugging Face:
`min_new_tokens = max_new_tokens`; CTranslate2: `min_decoding_length =
max_decoding_length`, which hold back `<eos>` until the last step); the
first call of each cell checks it and fails otherwise.
"""

import argparse
import functools
import json
import os
import sys
import time

import numpy as np

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]  # ids 0..3, as keras_attention's defaults
PAD, SOS, EOS = 0, 1, 2


class Vocabulary:
    """What CTranslate2's converter reads from a tokenizer: token strings by
    id (the model works on ids; names only have to be unique)."""

    def __init__(self, size):
        self.tokens = SPECIALS + [f"t{i}" for i in range(len(SPECIALS), size)]
        self.eos_token, self.unk_token = "</s>", "<unk>"

    def get_vocab(self):
        return {token: index for index, token in enumerate(self.tokens)}


def check(condition, message):
    """Raised, not asserted, so `python -O` keeps the equal-length check."""
    if not condition:
        raise AssertionError(message)


def build_hf(args):
    import torch
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(0)
    config = MarianConfig(
        vocab_size=args.vocab,
        decoder_vocab_size=args.vocab,
        d_model=args.width,
        encoder_layers=args.layers,
        decoder_layers=args.layers,
        encoder_attention_heads=args.heads,
        decoder_attention_heads=args.heads,
        encoder_ffn_dim=args.ffn,
        decoder_ffn_dim=args.ffn,
        activation_function="relu",  # as keras_attention's Transformer layers
        max_position_embeddings=max(512, args.length + 2, args.source_length + 2),
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=SOS,
        forced_eos_token_id=None,
        scale_embedding=True,
        share_encoder_decoder_embeddings=False,  # two tables, as TransformerSeq2Seq
        tie_word_embeddings=False,
    )
    return MarianMTModel(config).eval()


def convert_ct2(model, directory, vocab):
    """Save the Hugging Face model and convert it with CTranslate2's own
    converter; returns the converted folder."""
    from ctranslate2.converters import transformers as ct2_transformers

    hf_dir, ct2_dir = os.path.join(directory, "hf"), os.path.join(directory, "ct2")
    model.save_pretrained(hf_dir)

    # Marian checkpoints keep an extra <pad> row last, which the converter
    # drops; ours has <pad> at id 0 and no extra row, so keep every row.
    ct2_transformers.MarianMTLoader._remove_pad_weights = lambda self, spec: None

    class Converter(ct2_transformers.TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            return Vocabulary(vocab)

    Converter(hf_dir).convert(ct2_dir, force=True)
    return ct2_dir


def load_translators(model, args, systems):
    """CTranslate2's translators of the Hugging Face model, by system name
    (those of `systems` that are CTranslate2's)."""
    import ctranslate2

    translators = {}
    if any(name.startswith("ct2") for name in systems):
        ct2_dir = convert_ct2(model, args.workdir, args.vocab)
        for name, compute_type in (("ct2-fp32", "float32"), ("ct2-int8", "int8")):
            if name in systems:
                translators[name] = ctranslate2.Translator(
                    ct2_dir, device="cpu", compute_type=compute_type, intra_threads=args.threads
                )
    return translators


def generators(model, translators, source, length, vocab):
    """`hf(search, batch)` and `ct2(name, search, batch)`: one generation
    of exactly `length` tokens per row, checked."""
    import torch

    vocabulary = Vocabulary(vocab)
    source_tokens = [[vocabulary.tokens[i] for i in row] for row in source]
    L = length

    def hf(search, batch):
        with torch.inference_mode():
            output = model.generate(
                input_ids=torch.from_numpy(source[:batch].astype(np.int64)),
                attention_mask=torch.ones((batch, source.shape[1]), dtype=torch.long),
                num_beams=1 if search == "greedy" else 4,
                do_sample=False,
                max_new_tokens=L,
                min_new_tokens=L,  # <eos> is masked until L tokens are out
                early_stopping=False,
            )
        # (B, 1 + L): the decoder start token, then exactly L tokens, none <eos>.
        check(tuple(output.shape) == (batch, 1 + L), f"Hugging Face output {output.shape}")
        check(not bool((output[:, 1:] == EOS).any()), "Hugging Face emitted <eos>")
        return output

    def ct2(name, search, batch):
        results = translators[name].translate_batch(
            source_tokens[:batch],
            beam_size=1 if search == "greedy" else 4,
            max_decoding_length=L,
            min_decoding_length=L,  # <eos> is masked until L tokens are out
            max_batch_size=batch,
            return_end_token=True,
        )
        lengths = {len(result.hypotheses[0]) for result in results}
        check(len(results) == batch and lengths == {L}, f"{name}: lengths {lengths}")
        check(all("</s>" not in r.hypotheses[0] for r in results), f"{name} emitted </s>")
        return results

    return hf, ct2


def serve(hf, ct2):
    """Answers the benchmark's requests on stdin (module docstring) until
    `quit` or the end of stdin."""
    checked = set()
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "quit":
            break
        system, search, batch = request["system"], request["search"], request["batch"]
        if system == "hf":
            call = functools.partial(hf, search, batch)
        else:
            call = functools.partial(ct2, system, search, batch)
        if (system, search, batch) not in checked:
            call()  # warm up and check the lengths once
            checked.add((system, search, batch))
        calls = []
        for _ in range(request["iters"]):
            start = time.perf_counter()
            call()
            calls.append(time.perf_counter() - start)
        print(json.dumps({"calls": calls}), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", required=True, help=".npy of int32 source ids (B, S)")
    parser.add_argument("--workdir", required=True, help="where the converted models go")
    parser.add_argument("--length", type=int, required=True, help="tokens generated")
    parser.add_argument("--source-length", type=int, required=True)
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--width", type=int, required=True)
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--ffn", type=int, required=True)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--systems", default="hf,ct2-fp32,ct2-int8")
    args = parser.parse_args(argv)

    import ctranslate2
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    systems = args.systems.split(",")
    source = np.load(args.source)
    model = build_hf(args)
    translators = load_translators(model, args, systems)
    hf, ct2 = generators(model, translators, source, args.length, args.vocab)
    versions = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "ctranslate2": ctranslate2.__version__,
        "threads": args.threads,
    }
    print(json.dumps({"ready": versions}), flush=True)
    serve(hf, ct2)


if __name__ == "__main__":
    main()
