"""bench/back_translation.py: the reverse model's corpus never holds the
entries it will back-translate, and the back-translated dictionary keeps
each English side with its new German one."""

import os

import pytest

from tests.bench_helpers import load_bench

back_translation = load_bench("back_translation")


@pytest.fixture
def run(tmp_path):
    data = tmp_path / "run" / "data"
    data.mkdir(parents=True)
    (data / "train.tsv").write_text("Guten Morgen.\tGood morning.\nDanke.\tThanks.\n")
    entries = [("Haus", "house"), ("Baum", "tree"), ("etw. tun", "to do sth."), ("rot", "red")]
    (data / "dictionary.tsv").write_text("".join(f"{g}\t{e}\n" for g, e in entries))
    return str(tmp_path / "run")


def test_the_reverse_corpus_swaps_sides_and_skips_the_held_entries(run, tmp_path):
    out = str(tmp_path / "bt" / "reverse.tsv")  # its folder is made
    assert back_translation.reverse_corpus(run, 1, out) == 4
    assert back_translation.read_pairs(out) == [
        ("Good morning.", "Guten Morgen."),
        ("Thanks.", "Danke."),
        ("tree", "Baum"),  # entries 1 and 2: as many as the training pairs, after the held one
        ("to do sth.", "etw. tun"),
    ]
    with open(tmp_path / "bt" / "english.txt", encoding="utf-8") as handle:
        assert handle.read() == "house\ntree\nto do sth.\nred\n"
    with pytest.raises(ValueError, match=r"--held: expected 0 to 2 .*; received 3"):
        back_translation.reverse_corpus(run, 3, out)


def test_the_dictionary_gets_the_back_translations_and_drops_blanks(run, tmp_path):
    translations = tmp_path / "german.txt"
    translations.write_text("Haus\nBaume\n\nrot\n")
    out = str(tmp_path / "dictionary.tsv")
    assert back_translation.back_translated_dictionary(run, str(translations), out) == (3, 2)
    assert back_translation.read_pairs(out) == [
        ("Haus", "house"),
        ("Baume", "tree"),
        ("rot", "red"),
    ]
    assert back_translation.back_translated_dictionary(run, str(translations), out, 2) == (2, 1)
    translations.write_text("Haus\n")
    with pytest.raises(ValueError, match="a line for each of the 4 .*; received 1 lines in"):
        back_translation.back_translated_dictionary(run, str(translations), out)
    translations.write_text("Haus\nBaume\n\nrot\nmehr\n")  # another dictionary's: one too many
    with pytest.raises(ValueError, match="a line for each of the 4 .*; received 5 lines in"):
        back_translation.back_translated_dictionary(run, str(translations), out)
    with pytest.raises(ValueError, match="--limit: expected a positive .*; received 0"):
        back_translation.back_translated_dictionary(run, str(translations), out, 0)
    with open(os.path.join(run, "data", "dictionary.tsv"), "a", encoding="utf-8") as handle:
        handle.write("kein Tab\n")
    with pytest.raises(ValueError, match=r"dictionary.tsv:5: expected 'source<TAB>target'"):
        back_translation.back_translated_dictionary(run, str(translations), out)


def test_a_mistake_is_one_line_with_status_2(run, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        back_translation.main(
            ["reverse-corpus", "--run", run, "--held", "9", "--out", str(tmp_path / "r.tsv")]
        )
    assert exit.value.code == 2
    assert capsys.readouterr().err == (
        "error: --held: expected 0 to 2 (the dictionary's 4 entries less the 2 the reverse "
        "model learns from); received 9\n"
    )
