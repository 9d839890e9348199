"""`bench/decoding.py --smoke` runs: ours only (tf.function and the exported
SavedModel, float32 and int8) on a tiny Transformer, with the forced-length
check; no peers' virtualenv needed."""

import pytest

from tests.bench_helpers import load_bench


@pytest.mark.large
@pytest.mark.tensorflow
def test_decoding_bench_smoke(capsys):
    bench = load_bench("decoding")
    bench.main(["--smoke"])
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("search"))
    columns = ["tf.function", "SavedModel", "int8 tf.function", "int8 SavedModel"]
    assert [c for c in columns if c in header] == columns
    table = [line.split() for line in lines if line.startswith(("greedy", "beam4"))]
    assert [row[:2] for row in table] == [["greedy", "2"], ["beam4", "2"]]
    assert all(len(row) == 2 + len(columns) for row in table)
    assert all(float(value) > 0 for row in table for value in row[2:])
    assert any(line.startswith("SavedModel variables: float32") for line in lines)
    # p50 / p99 milliseconds per request of every system in each cell.
    cells = [line for line in lines if line.startswith("- ")]
    assert cells == ["- greedy, batch 2:", "- beam4, batch 2:"]
    latencies = [line.split() for line in lines if line.startswith("  ours")]
    assert len(latencies) == 2 * len(columns)
    assert all(0 < float(row[-4]) <= float(row[-2]) for row in latencies)


@pytest.mark.large(reason="a benchmark's smoke run")
@pytest.mark.tensorflow
def test_int8_copy_is_quantized_and_loop_ops_are_counted():
    """The int8 rows run a quantized copy with the float model's weights,
    `loop_body_ops` counts the nodes of a search's while-loop body, and
    `compiled_loop_kernels` the kernels of its compiled step."""
    import tensorflow as tf

    from keras_attention.seq2seq import TransformerSeq2Seq
    from keras_attention.serving.records import quantized_copy

    bench = load_bench("decoding_searches")
    model = TransformerSeq2Seq(20, 20, hidden_dim=8, num_heads=2, intermediate_dim=16, num_layers=1)
    model.build()
    int8 = quantized_copy(model, "int8")
    assert int8.output_projection.quantization_mode == "int8"
    assert int8.output_projection._kernel.dtype == "int8"
    source = tf.constant([[3, 4, 5]])
    nodes, ops = bench.loop_body_ops(
        tf.function(bench.searches(model, 4)["beam4"], autograph=False), source
    )
    assert nodes == sum(ops.values()) > 0 and ops["TopKV2"] >= 2
    # The same step as XLA compiles it: kernels by opcode, no sinusoid.
    greedy = tf.function(bench.searches(model, 4)["greedy"], autograph=False, jit_compile=True)
    kernels, ops = bench.compiled_loop_kernels(greedy, source)
    assert ops.pop("sine/cosine") == 0
    assert kernels == sum(ops.values()) and ops["fusion"] > 0 and ops["dot"] > 0
    assert not set(ops) & set(bench.NOT_KERNELS)


@pytest.mark.large(reason="a benchmark's smoke run")
@pytest.mark.tensorflow
def test_int8_matmul_bench_times_every_product_against_float32(capsys):
    """bench/int8_matmul.py (why the int8 exports are weight-only) runs each
    product of each shape, plain and compiled by XLA, and sets each
    compiler's float32 at 1.00x its own time."""
    bench = load_bench("int8_matmul")
    bench.main(["--repeats", "1", "--calls", "1"])
    lines = capsys.readouterr().out.splitlines()
    products = [line.split("  ")[1].strip() for line in lines if line.startswith("  ")]
    names = ["float32", "weight-only int8", "int8 x int8", "int8 x int8, activations quantized"]
    expected = names + ["QuantizedMatMul"] + [f"{name} (XLA)" for name in names]
    assert products == expected * len(bench.SHAPES["beam"])
    rows = [line for line in lines if line.startswith("  ")]
    for product, line in zip(products, rows):
        base = "float32 (XLA)" if product.endswith("(XLA)") else "float32"
        assert line.endswith(f"x {base}'s time"), line
        if product == base:
            assert line.endswith(f"1.00x {base}'s time"), line
