#!/usr/bin/env python3
"""Writes reference_cases.json: encode and decode cases produced by the Hugging Face `tokenizers`
library (the reference implementation) on the vendored DeepSeek-V3 tokenizer.json.

The strings are random mixes of characters chosen where regex engines and Unicode tables tend to
disagree: every Unicode White_Space character and U+180E/U+200B/U+FEFF (not White_Space), digits
of several scripts and other numerics (No, Nl), the edges of the CJK/kana class of the second
Split regex, combining marks, emoji with modifiers and joiners, and added-token texts and their
fragments. The decode cases are random id sequences, including special tokens and ids that cut
characters in the middle.

Not run by the tests (they read its output, committed next to the other cases); rerun with
    pip install tokenizers==0.23.3
    python3 tests/tokenizer/make_reference_cases.py [--count N] [--out FILE]
"""
import argparse
import json
import os
import random

import tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "tokenizer", "deepseek_v3")

PIECES = [
    # ASCII
    "a", "Z", "the", " the", "Hello", "don't", "'s", "x1", "_", "0", "7", "12345",
    " ", "  ", "\t", "\n", "\r\n", "\r", "\x0b", "\x0c", "!", "?!", "...", "(", ")", "{", "}", "#", "$", "\\",
    "<", ">", "/", "-", ":", ";", "'", '"', "`", "~", "^", "|", "@", "&", "*", "+", "=", "%",
    # Unicode white space (all of White_Space) and look-alikes that are not
    "\u0085", "\u00a0", "\u1680", "\u2000", "\u2005", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f",
    "\u3000", "\u180e", "\u200b", "\ufeff", "\u200d",
    # digits and numbers of other scripts
    "\u0663", "\u096b", "\u00b2", "\u00bd", "\u216b", "\u2460", "\uff11", "\U0001d7d8",
    # letters, including the edges of [\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]
    "é", "ß", "Ω", "д", "한", "ㄱ", "\u4e00", "中", "国", "\u9fa5", "\u9fa6", "\u3040", "ぁ", "\u309f",
    "\u30a0", "ア", "\u30ff", "ｱ", "\u3005", "ー", "\u02b0", "ǅ",
    # marks
    "\u0301", "\u0903", "\u20dd", "\ufe0f",
    # punctuation and symbols
    "¿", "「", "」", "、", "。", "\u2018", "\u2019", "\u201c", "\u201d", "—", "…", "€", "±", "∑", "≤",
    "😀", "👍", "\U0001f3fd", "👨\u200d👩\u200d👧", "\U0001f1ef\U0001f1f5",
    # other categories. Characters assigned after Unicode 14 (the tables of PCRE2 10.42, Debian 12)
    # are left out on purpose: the reference's regex engine knows them as letters, PCRE2 10.42 as
    # unassigned, so they tokenize differently (e.g. U+1E030, U+31350; see docs/tokenizer.md).
    "\u0378", "\ue000", "\uffff", "\x00", "\x7f", "\u00ad",
    # added tokens and fragments
    "<｜User｜>", "<｜Assistant｜>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<|EOT|>",
    "<｜place▁holder▁no▁5｜>", "<｜tool▁sep｜>", "<｜User", "｜>", "▁", "<｜", "<|",
]


def random_text(rng):
    n = rng.randint(1, 12)
    return "".join(rng.choice(PIECES) for _ in range(n))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--decode-count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=20250101)
    parser.add_argument("--out", default=os.path.join(DATA, "reference_cases.json"))
    args = parser.parse_args()

    tok = tokenizers.Tokenizer.from_file(os.path.join(DATA, "tokenizer.json"))
    rng = random.Random(args.seed)

    encode = []
    for _ in range(args.count):
        text = random_text(rng)
        encode.append({"text": text, "ids": tok.encode(text, add_special_tokens=False).ids})

    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    special = [0, 1, 2, 128805, 128000, 128814]
    decode = []
    for _ in range(args.decode_count):
        ids = []
        for _ in range(rng.randint(1, 10)):
            r = rng.random()
            if r < 0.15:
                ids.append(rng.choice(special))
            elif r < 0.6:
                ids.append(rng.randrange(0, 256))  # single bytes: cut characters
            else:
                ids.append(rng.randrange(0, vocab_size))
        decode.append({
            "ids": ids,
            "text": tok.decode(ids, skip_special_tokens=False),
            "text_skip_special": tok.decode(ids, skip_special_tokens=True),
        })

    def lines(cases):  # one case per line: readable diffs
        return ",\n".join(json.dumps(c, ensure_ascii=True) for c in cases)

    with open(args.out, "w", encoding="utf-8") as f:
        f.write('{"generator": "tests/tokenizer/make_reference_cases.py",\n')
        f.write('"tokenizer": %s,\n' % json.dumps(
            "Hugging Face tokenizers " + tokenizers.__version__ + " on tokenizer.json"))
        f.write('"seed": %d,\n"add_special_tokens": false,\n' % args.seed)
        f.write('"encode": [\n%s\n],\n' % lines(encode))
        f.write('"decode": [\n%s\n]}\n' % lines(decode))


if __name__ == "__main__":
    main()
