"""`make gpu-check` (`recipes/gpu_check.py`): without a GPU it says so in
one line and exits 0; its training command is the demo's model, and every
command it would run (train, evaluate, tune) parses and passes the command
line's checks. The check itself runs on the CPU in the JAX virtualenv:
tests/test_recipe_portability.py."""

from keras_attention_recipes import gpu_check, translate
from keras_attention_recipes.translation.config import TranslationConfig


def test_without_a_gpu_it_says_so_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "visible_gpus", lambda: [])
    assert gpu_check.main([]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("gpu-check: no NVIDIA GPU on this machine")


def test_every_command_it_runs_parses_and_passes_the_checks():
    settings = gpu_check.check_settings("runs/gpu-check", 5.0, gpus=3)
    for name, values in settings.items():
        argv = gpu_check.command_line(name, values)
        config = translate.check(translate.parser().parse_args(argv))
        for setting, value in values.items():  # the command line says what the check meant
            assert getattr(config, setting) == value, (name, setting)
    assert settings["tune"]["trials"] == 3  # a trial per GPU
    assert gpu_check.check_settings("x", 5.0, gpus=1)["tune"]["trials"] == 2  # two at least


def test_its_training_settings_are_the_demo_s_model():
    settings = gpu_check.check_settings("x", 5.0, gpus=1)["train"]
    config = gpu_check.config_of(settings)
    demo = TranslationConfig.for_command("demo")
    for name in ("family", "preset", "hidden_dim", "vocab_size", "batch_tokens", "warmup"):
        assert getattr(config, name) == getattr(demo, name), name
    assert (config.average_last, config.learning_rate, config.dictionary) == (3, 5e-3, 0.5)
    assert (demo.average_last, demo.learning_rate, demo.dictionary) == (3, 5e-3, 0.5)
    assert config.mixed_precision == "bfloat16" and config.time_budget == 5


def test_the_gpus_shared_out_are_those_cuda_visible_devices_names(monkeypatch):
    """`distributed_tuning.visible_gpus`: the ids `CUDA_VISIBLE_DEVICES`
    names when set (up to a -1, which hides the rest), none for "", and
    otherwise every GPU `nvidia-smi -L` lists."""
    from keras_attention_recipes import distributed_tuning

    for value, ids in (("2,3", ["2", "3"]), ("", []), ("-1", []), ("0, -1, 1", ["0"])):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
        assert distributed_tuning.visible_gpus() == ids, value
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    listed = "GPU 0: NVIDIA H100 (UUID: a)\nGPU 1: NVIDIA H100 (UUID: b)\n"
    monkeypatch.setattr(
        distributed_tuning.subprocess,
        "run",
        lambda *a, **k: distributed_tuning.subprocess.CompletedProcess(a, 0, listed, ""),
    )
    assert distributed_tuning.visible_gpus() == ["0", "1"]
