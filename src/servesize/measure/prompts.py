"""Prompts of exactly S tokens that share no cached block with any other prompt.

A prompt is ``<id words> <filler>``. The id comes first, so the first KV block of every prompt
differs and, because block hashes chain, so does every later block: no two prompts share a cached
block. The id encodes a random per-run nonce and a sequence number as words (7 words, 56 bits); the
filler is a deterministic word stream drawn from a seeded generator over common English words
that most BPE vocabularies hold as one token each.

Exactness: when the server has vLLM's ``/tokenize`` endpoint (``POST /tokenize {model, prompt}
-> {count, tokens, max_model_len}``) each prompt is counted and its filler trimmed or extended until
the count is exactly S (the count includes any BOS token, as ``usage.prompt_tokens`` does). Without
it, the filler length is calibrated from probe requests' ``usage.prompt_tokens`` and later prompts
are assumed to count the same (approximate: ids tokenize a little differently; the actual counts are
recorded from each response's usage).
"""

from __future__ import annotations

import random

import aiohttp

from servesize.errors import ServesizeError
from servesize.frozen import frozen

# How long one /tokenize call may take before servesize stops asking it and calibrates from usage.prompt_tokens:
# vLLM tokenizes a prompt of 100k tokens in well under a second, so 10 s is a server that will not answer, and a
# prompt is made in up to 13 calls, so a slower bound would stall every prompt of the run
TOKENIZE_TIMEOUT_S = 10.0
MAX_TOKEN_COUNT = 2**31 - 1  # a /tokenize count taken (no context holds more; Infinity, NaN and 1e400 are no count)

WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had by "
    "word but not what all were we when your can said there use an each which she do how their if will up "
    "other about out many then them these so some her would make like him into time has look two more write "
    "go see number no way could people my than first water been call who oil its now find long down day did "
    "get come made may part over new sound take only little work know place year live me back give most very "
    "after thing our just name good sentence man think say great where help through much before line right "
    "too mean old any same tell boy follow came want show also around form three small set put end does "
    "another well large must big even such because turn here why ask went men read need land different home "
    "us move try kind hand picture again change off play spell air away animal house point page letter mother "
    "answer found study still learn should world high every near add food between own below country plant last "
    "school father keep tree never start city earth eye light thought head under story saw left few while along "
    "might close something seem next hard open example begin life always those both paper together got group often run "
    "important until children side feet car mile night walk white sea began grow took river four carry state once"
).split()
assert len(set(WORDS)) == len(WORDS) >= 256
ID_WORDS = WORDS[:256]


def id_words(nonce: int, seq: int) -> list[str]:
    """7 words naming (nonce, seq): 4 bytes of nonce, 3 bytes of sequence number."""
    raw = (nonce & 0xFFFFFFFF).to_bytes(4, "big") + (seq & 0xFFFFFF).to_bytes(3, "big")
    return [ID_WORDS[b] for b in raw]


def filler_words(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [WORDS[rng.randrange(len(WORDS))] for _ in range(n)]


@frozen
class Prompt:
    id: str
    text: str
    tokens: int  # the server's count (exact) or the calibrated estimate
    exact: bool


class PromptFactory:
    """Makes unique prompts of a given token count against one server (see module docstring)."""

    def __init__(self, client=None, *, seed: int = 0, nonce: int | None = None, use_tokenize: bool = True,
                 tokenize_timeout_s: float = TOKENIZE_TIMEOUT_S):
        self.client = client
        self.tokenize_timeout_s = tokenize_timeout_s
        self.seed = seed
        self.nonce = random.SystemRandom().getrandbits(32) if nonce is None else nonce
        self.use_tokenize = use_tokenize and client is not None
        self.mode: str | None = None  # 'tokenize' | 'probe' | 'words'
        self.note: str | None = None
        self._filler: list[str] = []
        self._offset: dict[int, int] = {}  # target tokens -> filler words minus target that worked last
        self.tokens_per_word = 1.0
        self._fixed = 0.0  # tokens not from filler words (id, BOS), estimate

    def filler(self, n: int) -> list[str]:
        if len(self._filler) < n:
            self._filler = filler_words(self.seed, max(n, 2 * len(self._filler), 1024))
        return self._filler[:n]

    async def count(self, text: str) -> int | None:
        """The server's token count of ``text`` via /tokenize, or None when it has no such endpoint."""
        if not self.use_tokenize:
            return None
        try:
            status, body = await self.client.post_json("/tokenize", {"model": self.client.model, "prompt": text},
                                                       timeout_s=self.tokenize_timeout_s)
        except TimeoutError:
            self.use_tokenize = False
            self.note = (f"/tokenize did not answer within {self.tokenize_timeout_s:g} s; prompt lengths calibrated "
                         "from usage.prompt_tokens")
            return None
        except (aiohttp.ClientError, OSError, UnicodeDecodeError) as exc:
            self.use_tokenize = False
            self.note = f"/tokenize unavailable ({type(exc).__name__}); prompt lengths calibrated from usage.prompt_tokens"
            return None
        if status != 200 or not isinstance(body, dict) or "count" not in body:
            self.use_tokenize = False
            self.note = f"/tokenize answered HTTP {status}; prompt lengths calibrated from usage.prompt_tokens"
            return None
        count = body["count"]
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_TOKEN_COUNT:
            self.use_tokenize = False
            self.note = (f"/tokenize answered count={str(count)[:40]!r}, not a token count; not trusted: prompt lengths "
                         "calibrated from usage.prompt_tokens")
            return None
        return count

    async def _check_ids_tokenize_apart(self) -> None:
        """Two prompts with different ids must differ in their first block of tokens, or every
        'unique' prompt would share the cache (a tokenizer that maps the id words to <unk> does that)."""
        firsts = []
        for seq in (0xFFFFF2, 0xFFFFF3):
            try:
                status, body = await self.client.post_json(
                    "/tokenize", {"model": self.client.model, "prompt": " ".join(id_words(self.nonce, seq))},
                    timeout_s=self.tokenize_timeout_s)
            except (aiohttp.ClientError, OSError, TimeoutError, UnicodeDecodeError):
                return
            if status != 200 or not isinstance(body, dict) or not isinstance(body.get("tokens"), list):
                return
            firsts.append(body["tokens"])
        if firsts[0] == firsts[1]:
            raise ServesizeError(
                "the server's tokenizer turns different prompt ids into the same tokens (unknown words?), so "
                "the prompts would share cached blocks and the measurement would be wrong; servesize refuses")

    def _text(self, uid_words: list[str], n_filler: int) -> str:
        return " ".join(uid_words + self.filler(max(0, n_filler)))

    async def start(self) -> None:
        """Choose the mode and calibrate: tokenize if the server has it, else probe requests."""
        if self.mode is not None:
            return
        if self.client is None:
            self.mode = "words"  # offline: one word = one token (the test server's tokenizer)
            return
        probe = self._text(id_words(self.nonce, 0xFFFFF0), 200)
        n = await self.count(probe)
        if n is not None:
            self.mode = "tokenize"
            self.tokens_per_word = n / 207
            await self._check_ids_tokenize_apart()
            return
        self.mode = "probe"
        points = []
        for i, words in enumerate((64, 512)):
            text = self._text(id_words(self.nonce, 0xFFFFF1 + i), words)
            r = await self.client.complete(text, max_tokens=1, request_id=f"calibrate-{i}")
            if not r.ok or r.prompt_tokens is None:
                self.note = (f"/tokenize unavailable and the calibration probe failed ({r.error_line() or 'no usage'}); "
                             "assuming one token per word")
                self.tokens_per_word, self._fixed = 1.0, 7.0
                return
            points.append((words, r.prompt_tokens))
        (w1, t1), (w2, t2) = points
        if t2 <= t1:
            raise ServesizeError(
                f"usage.prompt_tokens is {t1} for a {w1}-word probe and {t2} for a {w2}-word one: the server does not "
                "count prompt tokens, so prompt lengths cannot be calibrated (and /tokenize is unavailable); servesize refuses")
        self.tokens_per_word = (t2 - t1) / (w2 - w1)
        self._fixed = t1 - self.tokens_per_word * w1
        calibrated = (f"prompt lengths calibrated from two probes ({self.tokens_per_word:.3f} tokens per filler word); "
                      "counts are approximate")
        why = self.note.split(";")[0] if self.note and self.note.startswith("/tokenize ") else "/tokenize unavailable"
        self.note = f"{why}; {calibrated}"

    async def make(self, seq: int, tokens: int) -> Prompt:
        """A prompt of ``tokens`` tokens whose id is (nonce, seq)."""
        await self.start()
        uid = id_words(self.nonce, seq)
        pid = f"{self.nonce:08x}-{seq}"
        if self.mode == "words":
            n = tokens - len(uid)
            return Prompt(pid, self._text(uid, n), len(uid) + max(0, n), True)
        if self.mode == "probe":
            n = round((tokens - self._fixed) / self.tokens_per_word)
            return Prompt(pid, self._text(uid, n), tokens, False)
        n = tokens + self._offset.get(tokens, -len(uid))
        best: tuple[int, int, int] | None = None  # (|error|, n, the count /tokenize gave for n)
        for _ in range(12):
            count = await self.count(self._text(uid, n))
            if count is None:  # /tokenize went away mid-run: keep the rate it measured, lengths become estimates
                self.mode = "probe"
                self._fixed = len(uid) * self.tokens_per_word
                self.note = (f"/tokenize stopped answering mid-run; later prompt lengths are estimated at "
                             f"{self.tokens_per_word:.3f} tokens per word (counts approximate from then on)")
                return await self.make(seq, tokens)
            if count == tokens:
                self._offset[tokens] = n - tokens
                return Prompt(pid, self._text(uid, n), tokens, True)
            if best is None or abs(count - tokens) < best[0]:
                best = (abs(count - tokens), n, count)
            step = tokens - count
            n += step if abs(step) > 1 else (1 if step > 0 else -1)
        if best is None:  # every pass of the loop returns or sets it
            raise RuntimeError("PromptFactory.make: no /tokenize count was kept")
        _, n, counted = best
        count = await self.count(self._text(uid, n))
        # /tokenize can go away on this last call too: n's count from the loop stands (it was None here before)
        return Prompt(pid, self._text(uid, n), counted if count is None else count, False)
