#!/usr/bin/env python3
"""dsv32-server on loopback, driven by the official `openai` client (and by raw HTTP where the client
hides what is checked: status lines, error objects, the `data: [DONE]` event).

    test_server.py GROUP --server PATH --data DIR --tokenize PATH --generate PATH

GROUP is one of the test classes below (models, chat, completions, errors, scripted, concurrency, load,
disconnect, faults, shutdown, checkpoint, cli); each starts its own servers on free ports. Expected
values come from elsewhere than the server: dsv32-tokenize (prompt token counts, token texts),
dsv32-generate (the demo model's greedy tokens through generate()), the golden reference's tokens, the
scripted replies, and the same request sent alone.
"""
import argparse
import ctypes
import http.client
import json
import os
import queue
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import openai

ARGS = None
DEMO = "dsv32-demo"


# ------------------------------------------------------------------------------------------ helpers

def die_with_parent():
    """In the child before exec: SIGKILL when this test process ends, however it ends (a ctest timeout)."""
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Server:
    """A dsv32-server process on a free port."""

    def __init__(self, *extra, env=None, startup=120):
        full_env = dict(os.environ)
        full_env.pop("DSV32_API_KEY", None)
        full_env.update(env or {})
        self.proc = subprocess.Popen([ARGS.server, "--port", "0", *extra], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=full_env, preexec_fn=die_with_parent)
        self.stderr = []
        self._lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc.stdout, self._lines), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, None), daemon=True).start()
        try:
            line = self._lines.get(timeout=startup)
        except queue.Empty:
            self.kill()
            raise AssertionError("dsv32-server did not start: " + "".join(self.stderr))
        m = re.match(r"listening on http://([^:]+):(\d+)$", line.strip())
        if not m:
            self.kill()
            raise AssertionError("unexpected first line %r; stderr: %s" % (line, "".join(self.stderr)))
        self.port = int(m.group(2))
        self.base = "http://127.0.0.1:%d" % self.port

    def _read(self, stream, lines):
        for line in stream:
            if lines is not None:
                lines.put(line)
            else:
                self.stderr.append(line)

    def client(self, api_key="none", **kw):
        return openai.OpenAI(base_url=self.base + "/v1", api_key=api_key, max_retries=0, timeout=kw.get("timeout", 300))

    def request(self, method, path, body=None, headers=None, timeout=300):
        """(status, headers, body bytes); `body` is sent as JSON unless it is bytes."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        conn.request(method, path, body=data, headers=dict({"Content-Type": "application/json"}, **(headers or {})))
        r = conn.getresponse()
        out = (r.status, dict(r.getheaders()), r.read())
        conn.close()
        return out

    def post(self, path, body, **kw):
        status, _, data = self.request("POST", path, body, **kw)
        return status, json.loads(data)

    def metrics(self):
        status, _, data = self.request("GET", "/metrics")
        assert status == 200
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def wait_metrics(self, predicate, timeout=30):
        deadline = time.time() + timeout
        while True:
            m = self.metrics()
            if predicate(m) or time.time() > deadline:
                return m
            time.sleep(0.1)

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("dsv32-server did not exit within %d s of the signal" % timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Stream:
    """A raw streamed request: SSE events as they arrive, or an early close."""

    def __init__(self, server, path, body, headers=None):
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
        self.conn.request("POST", path, body=json.dumps(dict(body, stream=True)),
                          headers=dict({"Content-Type": "application/json"}, **(headers or {})))
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.buffer = b""

    def events(self):
        """Yields each event's data (str); stops at the end of the body."""
        while True:
            while b"\n\n" in self.buffer:
                event, self.buffer = self.buffer.split(b"\n\n", 1)
                for line in event.decode().split("\n"):
                    if line.startswith("data: "):
                        yield line[6:]
            chunk = self.response.read1(65536)
            if not chunk:
                return
            self.buffer += chunk

    def close(self):
        # shutdown() first: the peer sees the close even though the response object holds the socket
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()


def run_stream(server, path, body):
    """All events of a streamed request: (parsed chunks, whether it ended with [DONE], error events)."""
    s = Stream(server, path, body)
    assert s.status == 200, s.status
    chunks, done, errors = [], False, []
    for data in s.events():
        if data == "[DONE]":
            done = True
            continue
        assert not done, "an event after [DONE]"
        j = json.loads(data)
        (errors if "error" in j else chunks).append(j)
    s.close()
    return chunks, done, errors


def tokenize(*args, text):
    out = subprocess.run([ARGS.tokenize, "--tokenizer", tokenizer_dir(), *args, "--text", text], check=True,
                         capture_output=True, text=True).stdout
    return out


def tokenizer_dir():
    return os.path.join(ARGS.data, "tokenizer", "deepseek_v3_2_exp")


def decode(ids):
    """The text the server gives `ids` (special tokens skipped): dsv32-tokenize's, without the ids the
    model has and the tokenizer has not (129280 against 128815), which are no text."""
    global TOKENIZER_SIZE
    if TOKENIZER_SIZE is None:
        with open(os.path.join(tokenizer_dir(), "tokenizer.json")) as f:
            t = json.load(f)
        TOKENIZER_SIZE = 1 + max(max(t["model"]["vocab"].values()), max(a["id"] for a in t["added_tokens"]))
    return tokenize("--decode", "--skip-special", text=json.dumps([i for i in ids if i < TOKENIZER_SIZE]))


TOKENIZER_SIZE = None


def chat_prompt_ids(messages, thinking=False):
    return json.loads(tokenize("--chat", "--ids", text=json.dumps(
        {"messages": messages, "add_generation_prompt": True, "thinking": thinking})))


def sanitized():
    """Whether the server was built with AddressSanitizer (its figures of memory differ)."""
    with open(ARGS.server, "rb") as f:
        return b"__asan_init" in f.read()


def chat_stream(client, **kw):
    """A streamed chat completion through the client, summed up: reasoning, content, tool calls,
    finish_reason, usage, chunk count."""
    out = {"reasoning": "", "content": "", "tool_calls": {}, "finish_reason": None, "usage": None, "chunks": 0,
           "stop_reason": None, "logprobs": 0, "role": None}
    for chunk in client.chat.completions.create(stream=True, **kw):
        out["chunks"] += 1
        if chunk.usage is not None:
            out["usage"] = chunk.usage
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        d = c.delta
        if d.role:
            out["role"] = d.role
        out["reasoning"] += getattr(d, "reasoning_content", None) or ""
        out["content"] += d.content or ""
        for t in d.tool_calls or []:
            call = out["tool_calls"].setdefault(t.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += t.id or ""
            call["name"] += t.function.name or ""
            call["arguments"] += t.function.arguments or ""
        if c.logprobs is not None and c.logprobs.content:
            out["logprobs"] += len(c.logprobs.content)
        if c.finish_reason:
            out["finish_reason"] = c.finish_reason
            out["stop_reason"] = getattr(c, "stop_reason", None)
    return out


def error_of(response):
    status, body = response
    return status, body["error"]["type"], body["error"]["param"], body["error"]["code"], body["error"]["message"]


# ------------------------------------------------------------------------------------------ groups

class models(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def test_list_and_retrieve(self):
        client = self.server.client()
        listed = client.models.list()
        self.assertEqual([m.id for m in listed.data], [DEMO])
        self.assertEqual(listed.data[0].owned_by, "dsv32")
        self.assertEqual(client.models.retrieve(DEMO).id, DEMO)
        with self.assertRaises(openai.NotFoundError) as e:
            client.models.retrieve("gpt-4o")
        self.assertEqual(e.exception.body["code"], "model_not_found")

    def test_health_and_metrics(self):
        status, headers, body = self.server.request("GET", "/health")
        self.assertEqual((status, json.loads(body)), (200, {"status": "ok"}))
        status, headers, body = self.server.request("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/plain; version=0.0.4"))
        text = body.decode()
        for name in ("dsv32_http_requests_total", "dsv32_prompt_tokens_total", "dsv32_generation_tokens_total",
                     "dsv32_time_to_first_token_seconds", "dsv32_time_per_output_token_seconds",
                     "dsv32_requests_running", "dsv32_requests_waiting", "dsv32_cache_pages",
                     "dsv32_prefix_cache_hits_total", "dsv32_preemptions_total"):
            self.assertIn("# TYPE %s " % name, text)
        m = self.server.metrics()
        self.assertEqual(m['dsv32_cache_pages{state="used"}'], 0)
        self.assertEqual(m['dsv32_cache_pages{state="free"}'] + m['dsv32_cache_pages{state="cached"}'], 1024)
        self.assertEqual(m["dsv32_cache_page_size"], 64)


class chat(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.client = cls.server.client()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def create(self, **kw):
        return self.client.chat.completions.create(model=DEMO, **kw)

    def test_non_streamed_and_streamed_agree(self):
        messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colors."}]
        r = self.create(messages=messages, max_tokens=12, temperature=0)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.model, DEMO)
        self.assertTrue(r.id.startswith("chatcmpl-"))
        c = r.choices[0]
        self.assertEqual(c.message.role, "assistant")
        self.assertIsNone(c.message.reasoning_content)
        self.assertIsNone(c.message.tool_calls)
        # usage: the prompt as dsv32-tokenize renders and encodes it
        self.assertEqual(r.usage.prompt_tokens, len(chat_prompt_ids(messages)))
        if c.finish_reason == "length":
            self.assertEqual(r.usage.completion_tokens, 12)
        else:
            self.assertEqual(c.finish_reason, "stop")
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)
        s = chat_stream(self.client, model=DEMO, messages=messages, max_tokens=12, temperature=0,
                        stream_options={"include_usage": True})
        self.assertEqual(s["role"], "assistant")
        self.assertEqual(s["content"], c.message.content)
        self.assertEqual(s["reasoning"], "")
        self.assertEqual(s["finish_reason"], c.finish_reason)
        self.assertEqual(s["usage"].prompt_tokens, r.usage.prompt_tokens)
        self.assertEqual(s["usage"].completion_tokens, r.usage.completion_tokens)
        # the same conversation again: its prompt's full pages come from the prefix cache
        self.assertGreater(s["usage"].prompt_tokens_details.cached_tokens, -1)

    def test_raw_stream_shape(self):
        chunks, done, errors = run_stream(self.server, "/v1/chat/completions", {
            "model": DEMO, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "temperature": 0,
            "stream_options": {"include_usage": True}})
        self.assertTrue(done)
        self.assertEqual(errors, [])
        self.assertEqual(chunks[0]["choices"][0]["delta"], {"role": "assistant", "content": ""})  # role first
        finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
        self.assertEqual(len(finals), 1)
        self.assertEqual(finals[0]["choices"][0]["delta"], {})
        self.assertIs(chunks[-2], finals[0])  # then the usage, alone
        self.assertEqual(chunks[-1]["choices"], [])
        self.assertEqual(chunks[-1]["usage"]["completion_tokens"], 5)
        self.assertEqual(len({c["id"] for c in chunks}), 1)
        self.assertTrue(all(c["object"] == "chat.completion.chunk" for c in chunks))

    def test_thinking_on_and_off(self):
        messages = [{"role": "user", "content": "What is 2+2?"}]
        on = self.create(messages=messages, max_tokens=10, temperature=0, extra_body={"chat_template_kwargs": {"thinking": True}})
        off = self.create(messages=messages, max_tokens=10, temperature=0, extra_body={"chat_template_kwargs": {"thinking": False}})
        # the prompts end in <think> and </think>, one token each
        self.assertEqual(on.usage.prompt_tokens, len(chat_prompt_ids(messages, thinking=True)))
        self.assertEqual(on.usage.prompt_tokens, off.usage.prompt_tokens)
        # random weights never close the reasoning: thinking on, everything is reasoning
        self.assertTrue(on.choices[0].message.reasoning_content)
        self.assertEqual(on.choices[0].message.content, "")
        self.assertIsNone(off.choices[0].message.reasoning_content)
        self.assertTrue(off.choices[0].message.content)
        s = chat_stream(self.client, model=DEMO, messages=messages, max_tokens=10, temperature=0,
                        extra_body={"chat_template_kwargs": {"thinking": True}})
        self.assertEqual(s["reasoning"], on.choices[0].message.reasoning_content)
        self.assertEqual(s["content"], "")

    def test_seeds_reproduce(self):
        kw = dict(messages=[{"role": "user", "content": "Tell me a story."}], max_tokens=16, temperature=1.0, top_p=0.95)
        a = self.create(seed=1234, **kw).choices[0].message.content
        b = self.create(seed=1234, **kw).choices[0].message.content
        c = self.create(seed=4321, **kw).choices[0].message.content
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)
        s = chat_stream(self.client, model=DEMO, seed=1234, **kw)
        self.assertEqual(s["content"], a)
        greedy = [self.create(messages=kw["messages"], max_tokens=8, temperature=0, extra_body={"top_k": 5}).choices[0].message.content
                  for _ in range(2)]
        self.assertEqual(greedy[0], greedy[1])

    def test_logprobs(self):
        r = self.create(messages=[{"role": "user", "content": "Count."}], max_tokens=6, temperature=0, logprobs=True, top_logprobs=3)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        for t in content:
            self.assertEqual(len(t.top_logprobs), 3)
            # greedy: the chosen token is the most likely one
            self.assertEqual(t.top_logprobs[0].logprob, t.logprob)
            self.assertEqual(t.top_logprobs[0].token, t.token)
            self.assertLessEqual(t.logprob, 0)
            self.assertGreaterEqual(t.top_logprobs[1].logprob, t.top_logprobs[2].logprob)
            self.assertEqual(bytes(t.bytes).decode("utf-8", "replace"), t.token)
        self.assertEqual("".join(bytes(b for t in content for b in t.bytes).decode("utf-8", "replace")),
                         r.choices[0].message.content)
        s = chat_stream(self.client, model=DEMO, messages=[{"role": "user", "content": "Count."}], max_tokens=6,
                        temperature=0, logprobs=True, top_logprobs=3)
        self.assertEqual(s["logprobs"], len(content))

    def test_stop_strings(self):
        messages = [{"role": "user", "content": "Write a long sentence."}]
        full = self.create(messages=messages, max_tokens=24, temperature=0).choices[0].message.content
        # a stop string from the middle of the reply, occurring there first
        k = next(k for k in range(len(full) // 2, len(full) - 3) if full.find(full[k:k + 3]) == k and full[k:k + 3].strip())
        stop = full[k:k + 3]
        r = self.create(messages=messages, max_tokens=24, temperature=0, stop=[stop, "never-there"])
        self.assertEqual(r.choices[0].message.content, full[:k])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].stop_reason, stop)
        self.assertLess(r.usage.completion_tokens, 24)
        s = chat_stream(self.client, model=DEMO, messages=messages, max_tokens=24, temperature=0, stop=stop)
        self.assertEqual(s["content"], full[:k])
        self.assertEqual(s["finish_reason"], "stop")

    def test_multi_turn_and_content_parts(self):
        r = self.create(messages=[{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                                  {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                                  {"role": "user", "content": [{"type": "text", "text": "Again"}, {"type": "text", "text": "please"}]}],
                        max_tokens=4, temperature=0)
        expected = chat_prompt_ids([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                                    {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Again\nplease"}])
        self.assertEqual(r.usage.prompt_tokens, len(expected))


class completions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.client = cls.server.client()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def create(self, **kw):
        return self.client.completions.create(model=DEMO, **kw)

    def test_text_and_ids(self):
        prompt = "The capital of France is"
        ids = json.loads(tokenize("--add-special", text=prompt))
        r = self.create(prompt=prompt, max_tokens=10, temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(r.usage.prompt_tokens, len(ids))  # bos + the text, as dsv32-tokenize encodes it
        self.assertIn(r.choices[0].finish_reason, ("length", "stop"))
        by_ids = self.create(prompt=ids, max_tokens=10, temperature=0)
        self.assertEqual(by_ids.choices[0].text, r.choices[0].text)
        default = self.create(prompt=prompt, temperature=0)  # max_tokens defaults to 16
        self.assertEqual(default.usage.completion_tokens, 16)
        self.assertTrue(default.choices[0].text.startswith(r.choices[0].text.rstrip("\ufffd")))

    def test_streamed_agrees(self):
        kw = dict(prompt="Once upon a time", max_tokens=12, temperature=0, logprobs=2)
        r = self.create(**kw)
        text, n, finish, usage = "", 0, None, None
        for chunk in self.client.completions.create(model=DEMO, stream=True, stream_options={"include_usage": True}, **kw):
            if chunk.usage:
                usage = chunk.usage
            if not chunk.choices:
                continue
            text += chunk.choices[0].text
            if chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
            elif chunk.choices[0].logprobs:
                n += len(chunk.choices[0].logprobs.tokens)
        self.assertEqual(text, r.choices[0].text)
        self.assertEqual(finish, r.choices[0].finish_reason)
        self.assertEqual(n, r.usage.completion_tokens)  # a chunk per token, each with its log-probability
        self.assertEqual(usage.completion_tokens, r.usage.completion_tokens)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), r.usage.completion_tokens)
        self.assertEqual(len(lp.top_logprobs[0]), 2)
        self.assertEqual(lp.text_offset[0], 0)

    def test_token_ids_and_stop_ids(self):
        full = self.create(prompt="Numbers:", max_tokens=20, temperature=0, logprobs=0,
                           extra_body={"return_tokens_as_token_ids": True})
        ids = [int(t.split(":")[1]) for t in full.choices[0].logprobs.tokens]
        self.assertEqual(len(ids), full.usage.completion_tokens)
        # the text is those ids decoded (special tokens skipped), as dsv32-tokenize decodes them
        self.assertEqual(full.choices[0].text, decode(ids))
        k = next(k for k in range(5, len(ids)) if ids[k] not in ids[:k])
        r = self.create(prompt="Numbers:", max_tokens=20, temperature=0, extra_body={"stop_token_ids": [ids[k]]})
        self.assertEqual(r.usage.completion_tokens, k)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].stop_reason, ids[k])
        self.assertEqual(r.choices[0].text, decode(ids[:k]))

    def test_same_tokens_as_dsv32_generate(self):
        # dsv32-generate's embedded model is the demo model (same preset, same seed): its greedy
        # tokens through generate(), against the server's through the engine and HTTP
        prompt = [1, 17, 42, 99, 256, 7, 311, 5]
        out = subprocess.run([ARGS.generate, "--prompt-ids", " ".join(map(str, prompt)), "--temperature", "0",
                              "--max-new-tokens", "16", "--quiet"], check=True, capture_output=True, text=True).stdout
        expected = [int(t) for t in out.split()]
        self.assertEqual(len(expected), 16)
        r = self.create(prompt=prompt, max_tokens=16, temperature=0, logprobs=0, extra_body={"return_tokens_as_token_ids": True})
        got = [int(t.split(":")[1]) for t in r.choices[0].logprobs.tokens]
        self.assertEqual(got, expected[:len(got)])
        self.assertEqual(len(got), 16 if 1 not in expected else expected.index(1))  # eos (id 1) ends the server's

    def test_stop_strings(self):
        full = self.create(prompt="Hello", max_tokens=24, temperature=0).choices[0].text
        k = next(k for k in range(len(full) // 2, len(full) - 2) if full.find(full[k:k + 2]) == k and full[k:k + 2].strip())
        r = self.create(prompt="Hello", max_tokens=24, temperature=0, stop=full[k:k + 2])
        self.assertEqual(r.choices[0].text, full[:k])
        self.assertEqual(r.choices[0].stop_reason, full[k:k + 2])
        streamed = "".join(c.choices[0].text for c in self.client.completions.create(
            model=DEMO, prompt="Hello", max_tokens=24, temperature=0, stop=full[k:k + 2], stream=True) if c.choices)
        self.assertEqual(streamed, full[:k])


class errors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("--max-seq-len", "256")
        cls.client = cls.server.client()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def chat(self, body):
        return self.server.post("/v1/chat/completions", body)

    def base(self, **kw):
        return dict({"model": DEMO, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}, **kw)

    def check(self, response, status, param, code, message=None, type_="invalid_request_error"):
        got = error_of(response)
        self.assertEqual(got[:4], (status, type_, param, code), got)
        if message:
            self.assertIn(message, got[4])

    def test_bad_json_and_shapes(self):
        status, _, body = self.server.request("POST", "/v1/chat/completions", b'{"model": "dsv32-demo", "messages": [')
        self.check((status, json.loads(body)), 400, None, "invalid_json", "not valid JSON")
        self.check(self.chat([1, 2]), 400, None, "invalid_type", "must be a JSON object")
        self.check(self.chat({"model": DEMO}), 400, "messages", "missing_required_parameter")
        self.check(self.chat({"messages": [{"role": "user", "content": "x"}]}), 400, "model", "missing_required_parameter")
        self.check(self.chat(self.base(messages=[])), 400, "messages", "invalid_value")
        self.check(self.chat(self.base(temperature="hot")), 400, "temperature", "invalid_type",
                   "'temperature': expected a number, got a string")
        self.check(self.chat(self.base(max_tokens=-1)), 400, "max_tokens", "invalid_value")
        self.check(self.chat(self.base(messages=[{"role": "robot", "content": "x"}])), 400, "messages[0].role", "invalid_value")
        self.check(self.chat(self.base(messages=[{"role": "user", "content": 7}])), 400, "messages[0].content", "invalid_type")
        self.check(self.chat(self.base(bogus=True)), 400, "bogus", "unknown_parameter")
        self.check(self.chat(self.base(stop_token_ids=[129280])), 400, "stop_token_ids[0]", "invalid_value")

    def test_orders_the_format_refuses(self):
        self.check(self.chat(self.base(messages=[{"role": "developer", "content": "x"}, {"role": "user", "content": "y"}])),
                   400, "messages", "invalid_value", "unknown role \"developer\"")
        self.check(self.chat(self.base(messages=[{"role": "tool", "content": "x"}])), 400, "messages", "invalid_value",
                   "a tool message must follow an assistant message with tool_calls")

    def test_unsupported_fields_are_refused(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model=DEMO, messages=[{"role": "user", "content": "Hi"}], n=2)
        self.assertEqual(e.exception.body["code"], "unsupported_parameter")
        self.assertEqual(e.exception.body["param"], "n")
        for field, value in (("presence_penalty", 0.5), ("logit_bias", {"1": 5}), ("tool_choice", "required"),
                             ("response_format", {"type": "json_object"})):
            self.check(self.chat(self.base(**{field: value})), 400, field, "unsupported_parameter")
        self.check(self.server.post("/v1/completions", {"model": DEMO, "prompt": "x", "echo": True}), 400, "echo",
                   "unsupported_parameter")

    def test_context_and_vocabulary(self):
        self.check(self.server.post("/v1/completions", {"model": DEMO, "prompt": [1, 129280]}), 400, "prompt",
                   "invalid_value", "outside the model's vocabulary [0, 129280)")
        self.check(self.server.post("/v1/completions", {"model": DEMO, "prompt": list(range(1, 300))}), 400, "prompt",
                   "context_length_exceeded", "maximum context length is 256 tokens")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model=DEMO, prompt=[1, 2, 3], max_tokens=254)
        self.assertEqual(e.exception.body["code"], "context_length_exceeded")
        self.assertEqual(e.exception.body["param"], "max_tokens")
        self.assertEqual(self.client.completions.create(model=DEMO, prompt=[1, 2, 3], max_tokens=253,
                                                        temperature=0).usage.completion_tokens in range(1, 254), True)
        long_chat = self.base(messages=[{"role": "user", "content": "word " * 300}])
        self.check(self.chat(long_chat), 400, "messages", "context_length_exceeded")

    def test_model_route_method(self):
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}])
        self.assertEqual(e.exception.body["code"], "model_not_found")
        self.assertEqual(e.exception.body["param"], "model")
        status, _, body = self.server.request("GET", "/v1/embeddings")
        self.check((status, json.loads(body)), 404, None, "unknown_url")
        status, headers, body = self.server.request("GET", "/v1/chat/completions")
        self.check((status, json.loads(body)), 405, None, "method_not_allowed")
        self.assertEqual(headers["Allow"], "POST")
        status, headers, body = self.server.request("POST", "/v1/models", {})
        self.check((status, json.loads(body)), 405, None, "method_not_allowed")
        self.assertEqual(headers["Allow"], "GET")

    def test_errors_are_counted(self):
        before = self.server.metrics().get('dsv32_http_requests_total{endpoint="/v1/completions",status="400"}', 0)
        for _ in range(3):
            self.server.post("/v1/completions", {"model": DEMO})
        # a response is counted by cpp-httplib's logger, which runs once the response is written: the
        # client can ask for /metrics before the server thread of its last request got there
        key = 'dsv32_http_requests_total{endpoint="/v1/completions",status="400"}'
        after = self.server.wait_metrics(lambda m: m.get(key, 0) >= before + 3, timeout=10)[key]
        self.assertEqual(after - before, 3)


class scripted(unittest.TestCase):
    """Replies random weights never give (reasoning, tool calls, broken markup), scripted through the
    real engine (--scripted-output), in both chat formats."""

    TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                              "required": ["city"]}}}]

    @classmethod
    def setUpClass(cls):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "script.json")
        cls.exp = Server("--scripted-output", script)
        cls.v32 = Server("--scripted-output", script, "--chat-format", "deepseek-v3.2")
        cls.client, cls.client32 = cls.exp.client(), cls.v32.client()

    @classmethod
    def tearDownClass(cls):
        assert cls.exp.stop() == 0
        assert cls.v32.stop() == 0

    def both(self, client=None, **kw):
        """The non-streamed message and the streamed sum of the same greedy request."""
        client = client or self.client
        kw = dict(dict(model=DEMO, max_tokens=100, temperature=0), **kw)
        r = client.chat.completions.create(**kw)
        s = chat_stream(client, **kw)
        m = r.choices[0].message
        self.assertEqual(s["content"], m.content or "")
        self.assertEqual(s["reasoning"], m.reasoning_content or "")
        self.assertEqual([(c["name"], c["arguments"]) for _, c in sorted(s["tool_calls"].items())],
                         [(c.function.name, c.function.arguments) for c in m.tool_calls or []])
        self.assertTrue(all(c["id"].startswith("call_") for c in s["tool_calls"].values()))
        self.assertEqual(s["finish_reason"], r.choices[0].finish_reason)
        return r

    def test_reasoning(self):
        r = self.both(messages=[{"role": "user", "content": "SCRIPT_REASON: 2+2?"}],
                      extra_body={"chat_template_kwargs": {"thinking": True}})
        m = r.choices[0].message
        self.assertEqual(m.reasoning_content, "The user asks for 2+2.")
        self.assertEqual(m.content, "The answer is 4.")
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_tool_call_round_trip(self):
        messages = [{"role": "user", "content": "SCRIPT_TOOL: what is the weather in Paris?"}]
        r = self.both(messages=messages, tools=self.TOOLS)
        m = r.choices[0].message
        self.assertEqual(r.choices[0].finish_reason, "tool_calls")
        self.assertIsNone(m.content)
        self.assertEqual(len(m.tool_calls), 1)
        call = m.tool_calls[0]
        self.assertEqual((call.type, call.function.name, call.function.arguments), ("function", "get_weather", '{"city": "Paris"}'))
        self.assertTrue(call.id.startswith("call_"))
        # the assistant's message sent back as the client gives it (nulls included), then the result
        messages += [m.model_dump(), {"role": "tool", "tool_call_id": call.id, "content": "SCRIPT_RESULT: 22C"}]
        r2 = self.both(messages=messages, tools=self.TOOLS)
        self.assertEqual(r2.choices[0].message.content, "It is 22C in Paris.")
        self.assertEqual(r2.choices[0].finish_reason, "stop")
        self.assertIsNone(r2.choices[0].message.tool_calls)

    def test_two_calls_streamed_with_content(self):
        r = self.both(messages=[{"role": "user", "content": "SCRIPT_TWO_TOOLS"}], tools=self.TOOLS)
        m = r.choices[0].message
        self.assertEqual(m.content, "Checking both.")
        self.assertEqual([c.function.arguments for c in m.tool_calls], ['{"city": "Paris"}', '{"city": "Rome"}'])
        self.assertEqual(len({c.id for c in m.tool_calls}), 2)
        chunks, done, _ = run_stream(self.exp, "/v1/chat/completions", {
            "model": DEMO, "temperature": 0, "messages": [{"role": "user", "content": "SCRIPT_TWO_TOOLS"}]})
        calls = [t for c in chunks for t in c["choices"][0]["delta"].get("tool_calls", [])]
        self.assertEqual([t["index"] for t in calls], [0, 1])
        self.assertTrue(done)

    def test_tools_reach_the_prompt(self):
        ask = [{"role": "user", "content": "Anything new?"}]
        self.assertEqual(self.both(messages=ask, tools=self.TOOLS).choices[0].message.content, "TOOLS_SEEN")
        none = self.client.chat.completions.create(model=DEMO, messages=ask, tools=self.TOOLS, tool_choice="none",
                                                   max_tokens=5, temperature=0)
        self.assertNotEqual(none.choices[0].message.content, "TOOLS_SEEN")  # the model's own gibberish
        self.assertEqual(none.usage.prompt_tokens, len(chat_prompt_ids(ask)))

    def test_stop_string_in_a_script(self):
        r = self.both(messages=[{"role": "user", "content": "SCRIPT_STOP"}], stop=["STOP"])
        self.assertEqual(r.choices[0].message.content, "alpha beta ")
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].stop_reason, "STOP")

    def test_broken_markup_is_content(self):
        r = self.both(messages=[{"role": "user", "content": "SCRIPT_BROKEN"}])
        self.assertEqual(r.choices[0].message.content,
                         "Hello<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}</think>tail")
        self.assertIsNone(r.choices[0].message.tool_calls)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        # text the parser held back (a "<" that might start a marker) is given once, before the break
        r = self.both(messages=[{"role": "user", "content": "SCRIPT_LT"}])
        self.assertEqual(r.choices[0].message.content, "Hi <</think> end")
        # a complete call before the break is kept; the broken rest is content
        r = self.both(messages=[{"role": "user", "content": "SCRIPT_HALF"}])
        m = r.choices[0].message
        self.assertEqual([(c.function.name, c.function.arguments) for c in m.tool_calls], [("a", "{}")])
        self.assertEqual(m.content, "<｜tool▁call▁begin｜>b</think> end")

    def test_call_cut_by_max_tokens(self):
        reply = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                 '{"city": "Paris", "unit": "celsius", "days": 3}<｜tool▁call▁end｜><｜tool▁calls▁end｜>')
        ids = json.loads(tokenize(text=reply))
        r = self.both(messages=[{"role": "user", "content": "SCRIPT_LONG_CALL"}], max_tokens=8)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertIsNone(r.choices[0].message.tool_calls)
        # the unfinished call is handed back as the text of its 8 tokens
        self.assertEqual(r.choices[0].message.content, tokenize("--decode", text=json.dumps(ids[:8])))

    def test_v3_2_dsml_round_trip(self):
        messages = [{"role": "developer", "content": "You check weather."},
                    {"role": "user", "content": "SCRIPT_DSML: Paris?"}]
        r = self.both(client=self.client32, messages=messages, tools=self.TOOLS)
        m = r.choices[0].message
        self.assertEqual(m.content, "Checking.")
        self.assertEqual([(c.function.name, c.function.arguments) for c in m.tool_calls],
                         [("get_weather", '{"city": "Paris", "days": 3}')])
        self.assertEqual(r.choices[0].finish_reason, "tool_calls")
        messages += [m.model_dump(), {"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": "SCRIPT_RESULT"}]
        r2 = self.both(client=self.client32, messages=messages, tools=self.TOOLS)
        self.assertEqual(r2.choices[0].message.content, "It is 22C in Paris.")

    def test_v3_2_thinking_and_broken_markup(self):
        r = self.both(client=self.client32, messages=[{"role": "user", "content": "SCRIPT_V32_THINK"}],
                      extra_body={"chat_template_kwargs": {"thinking": True}})
        self.assertEqual(r.choices[0].message.reasoning_content, "Reasoning here.")
        self.assertEqual(r.choices[0].message.content, "Done.")
        r = self.both(client=self.client32, messages=[{"role": "user", "content": "SCRIPT_DSML_BROKEN"}])
        self.assertEqual(r.choices[0].message.content, 'Look: <｜DSML｜invoke name="x"> oops')
        self.assertIsNone(r.choices[0].message.tool_calls)
        with self.assertRaises(openai.BadRequestError) as e:  # V3.2 cannot continue after an assistant turn
            self.client32.chat.completions.create(model=DEMO, messages=[{"role": "user", "content": "a"},
                                                                        {"role": "assistant", "content": "b"}])
        self.assertEqual(e.exception.body["param"], "messages")


class concurrency(unittest.TestCase):
    def test_concurrent_equals_alone(self):
        server = Server()
        try:
            client = server.client()
            system = ("You are a careful assistant. " * 40).strip()  # shared full pages: prefix cache hits
            requests = [dict(model=DEMO, max_tokens=20, temperature=0,
                             messages=[{"role": "system", "content": system},
                                       {"role": "user", "content": "Question %d: %s" % (i, "why " * i)}])
                        for i in range(16)]
            alone = [client.chat.completions.create(**r) for r in requests]
            results = [None] * 16

            def run(i):
                results[i] = client.chat.completions.create(**requests[i])

            threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for a, b in zip(alone, results):
                self.assertEqual(b.choices[0].message.content.encode(), a.choices[0].message.content.encode())
                self.assertEqual(b.usage.completion_tokens, a.usage.completion_tokens)
            self.assertGreater(sum(r.usage.prompt_tokens_details.cached_tokens for r in results), 0)
            m = server.metrics()
            self.assertGreater(m["dsv32_prefix_cache_hits_total"], 0)
            self.assertEqual(len({a.choices[0].message.content for a in alone}), 16)  # different prompts, different replies
        finally:
            self.assertEqual(server.stop(), 0)


class load(unittest.TestCase):
    CLIENTS = 64

    def drive(self, server, seconds):
        """64 streaming clients for `seconds`: counts and failures."""
        deadline = time.time() + seconds
        lock = threading.Lock()
        stats = {"requests": 0, "failures": []}

        def client(i):
            rng = random.Random(i)
            while time.time() < deadline:
                body = {"model": DEMO, "max_tokens": rng.randint(4, 24), "temperature": 0.8, "seed": rng.randint(0, 10**6),
                        "messages": [{"role": "user", "content": "client %d says %s" % (i, "hi " * rng.randint(1, 30))}],
                        "stream_options": {"include_usage": True}}
                try:
                    chunks, done, errors = run_stream(server, "/v1/chat/completions", body)
                    finish = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
                    ok = done and not errors and len(finish) == 1 and chunks[-1]["usage"]["completion_tokens"] <= body["max_tokens"]
                    with lock:
                        stats["requests"] += 1
                        if not ok:
                            stats["failures"].append((done, errors, chunks[-2:]))
                except Exception as e:  # noqa: BLE001 - every failure counts
                    with lock:
                        stats["failures"].append(repr(e))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(self.CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return stats

    def test_64_streaming_clients(self):
        server = Server()
        try:
            warm = self.drive(server, 5)
            self.assertEqual(warm["failures"], [])
            idle = lambda m: m["dsv32_requests_running"] == 0 and m["dsv32_requests_waiting"] == 0
            server.wait_metrics(idle)
            rss_warm = server.rss_kib()
            run = self.drive(server, 15)
            self.assertEqual(run["failures"], [], "failed streams")
            self.assertGreater(run["requests"], self.CLIENTS)
            ok = 'dsv32_http_requests_total{endpoint="/v1/chat/completions",status="200"}'
            total = warm["requests"] + run["requests"]
            # (a response is counted once written: just after its client read the end)
            m = server.wait_metrics(lambda m: idle(m) and m['dsv32_cache_pages{state="used"}'] == 0 and m[ok] == total)
            self.assertEqual(m["dsv32_requests_running"], 0)
            self.assertEqual(m['dsv32_cache_pages{state="used"}'], 0)  # every page back
            self.assertEqual(m[ok], total)
            rss_after = server.rss_kib()
            print("load: %d + %d streamed requests, RSS %d KiB after warm-up, %d KiB after the run (%.3fx)" %
                  (warm["requests"], run["requests"], rss_warm, rss_after, rss_after / rss_warm))
            if sanitized():
                print("load: AddressSanitizer build: its quarantine holds freed memory; RSS not compared")
            else:
                self.assertLessEqual(rss_after, 1.1 * rss_warm)
        finally:
            self.assertEqual(server.stop(), 0)


class disconnect(unittest.TestCase):
    def test_client_gone_mid_stream(self):
        server = Server()
        try:
            s = Stream(server, "/v1/chat/completions", {"model": DEMO, "max_tokens": 3000, "temperature": 0,
                                                         "messages": [{"role": "user", "content": "Go on forever."}]})
            events = s.events()
            for _ in range(3):
                next(events)
            # (the engine publishes its figures after each step: the token may come first)
            self.assertEqual(server.wait_metrics(lambda m: m["dsv32_requests_running"] == 1)["dsv32_requests_running"], 1)
            s.close()
            m = server.wait_metrics(lambda m: m["dsv32_requests_running"] == 0, timeout=20)
            self.assertEqual(m["dsv32_requests_running"], 0)
            self.assertEqual(m['dsv32_cache_pages{state="used"}'], 0)
            self.assertEqual(m['dsv32_requests_finished_total{reason="cancelled"}'], 1)
            self.assertEqual(m["dsv32_client_disconnects_total"], 1)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_client_gone_while_queued(self):
        server = Server("--max-running", "1")
        try:
            body = {"model": DEMO, "max_tokens": 3000, "temperature": 0, "messages": [{"role": "user", "content": "Long."}]}
            a = Stream(server, "/v1/chat/completions", body)
            ea = a.events()
            next(ea), next(ea)  # A runs
            server.wait_metrics(lambda m: m["dsv32_requests_running"] == 1)
            b = Stream(server, "/v1/chat/completions", body)
            next(b.events())  # B's role chunk: it waits
            self.assertEqual(server.wait_metrics(lambda m: m["dsv32_requests_waiting"] == 1)["dsv32_requests_waiting"], 1)
            b.close()
            # found by the stream's keep-alive comment within a few seconds, while A still runs
            m = server.wait_metrics(lambda m: m["dsv32_requests_waiting"] == 0, timeout=15)
            self.assertEqual(m["dsv32_requests_waiting"], 0)
            self.assertEqual(m["dsv32_requests_running"], 1)
            a.close()
            m = server.wait_metrics(lambda m: m["dsv32_requests_running"] == 0)
            self.assertEqual(m['dsv32_cache_pages{state="used"}'], 0)
            self.assertEqual(m['dsv32_requests_finished_total{reason="cancelled"}'], 2)
        finally:
            self.assertEqual(server.stop(), 0)


class faults(unittest.TestCase):
    def test_api_key(self):
        for server in (Server("--api-key", "s3cret"), Server(env={"DSV32_API_KEY": "s3cret"})):
            try:
                status, headers, body = server.request("GET", "/v1/models")
                self.assertEqual(status, 401)
                self.assertEqual(json.loads(body)["error"]["code"], "invalid_api_key")
                self.assertEqual(headers["WWW-Authenticate"], "Bearer")
                for key in ("s3cre", "s3cret!", "S3CRET"):
                    with self.assertRaises(openai.AuthenticationError):
                        server.client(api_key=key).models.list()
                self.assertEqual(server.client(api_key="s3cret").models.list().data[0].id, DEMO)
                self.assertEqual(server.request("GET", "/health")[0], 200)  # outside /v1: open
            finally:
                self.assertEqual(server.stop(), 0)

    def test_queue_limit(self):
        server = Server("--max-running", "1", "--max-waiting", "1")
        try:
            body = {"model": DEMO, "max_tokens": 3000, "temperature": 0, "messages": [{"role": "user", "content": "Long."}]}
            a = Stream(server, "/v1/chat/completions", body)
            ea = a.events()
            next(ea), next(ea)
            # A runs once the engine says so (it publishes its figures after each step; until then a
            # request admitted in the step still counts as waiting)
            server.wait_metrics(lambda m: m["dsv32_requests_running"] == 1)
            b = Stream(server, "/v1/chat/completions", body)
            self.assertEqual(b.status, 200)
            next(b.events())
            self.assertEqual(server.wait_metrics(lambda m: m["dsv32_requests_waiting"] == 1)["dsv32_requests_waiting"], 1)
            with self.assertRaises(openai.RateLimitError) as e:
                server.client().chat.completions.create(**body)
            self.assertEqual(e.exception.body["code"], "server_busy")
            status, body_ = server.post("/v1/completions", {"model": DEMO, "prompt": "x"})
            self.assertEqual((status, body_["error"]["type"]), (429, "rate_limit_error"))
            a.close()
            b.close()
            m = server.wait_metrics(lambda m: m["dsv32_requests_running"] == 0 and m["dsv32_requests_waiting"] == 0)
            self.assertEqual(m['dsv32_cache_pages{state="used"}'], 0)
            self.assertEqual(server.client().completions.create(model=DEMO, prompt="x", max_tokens=2).usage.completion_tokens, 2)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_body_limit(self):
        server = Server("--max-body-bytes", "4096")
        try:
            big = {"model": DEMO, "messages": [{"role": "user", "content": "x" * 8000}]}
            status, body = server.post("/v1/chat/completions", big)
            self.assertEqual(error_of((status, body))[:4], (413, "invalid_request_error", None, "request_too_large"))
            with self.assertRaises(openai.APIStatusError) as e:
                server.client().chat.completions.create(**big)
            self.assertEqual(e.exception.status_code, 413)
            ok = server.client().chat.completions.create(model=DEMO, messages=[{"role": "user", "content": "x"}], max_tokens=1)
            self.assertEqual(ok.usage.completion_tokens, 1)
        finally:
            self.assertEqual(server.stop(), 0)


class shutdown(unittest.TestCase):
    def test_in_flight_request_finishes(self):
        # a deadline far above the stream's length on any host (the sanitizer build on a loaded host
        # took over 60 s for these 1,000 tokens): this test is about draining, not about the deadline
        server = Server("--shutdown-timeout", "600")
        s = Stream(server, "/v1/chat/completions", {"model": DEMO, "max_tokens": 1000, "temperature": 0,
                                                     "stream_options": {"include_usage": True},
                                                     "messages": [{"role": "user", "content": "Talk."}]})
        events = s.events()
        next(events), next(events)
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        # draining: new work is refused, the stream goes on to its end
        status, body = server.post("/v1/completions", {"model": DEMO, "prompt": "x"})
        self.assertEqual((status, body["error"]["code"]), (503, "shutting_down"))
        rest = [json.loads(e) if e != "[DONE]" else e for e in events]
        self.assertEqual(rest[-1], "[DONE]")
        self.assertEqual(rest[-2]["usage"]["completion_tokens"], 1000)
        self.assertEqual(rest[-3]["choices"][0]["finish_reason"], "length")
        self.assertEqual(server.stop(timeout=30), 0)
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", server.port), timeout=5)

    def test_deadline_cancels(self):
        server = Server("--shutdown-timeout", "1")
        s = Stream(server, "/v1/chat/completions", {"model": DEMO, "max_tokens": 4000, "temperature": 0,
                                                     "messages": [{"role": "user", "content": "Talk on."}]})
        events = s.events()
        next(events), next(events)
        start = time.time()
        server.proc.send_signal(signal.SIGINT)
        rest = list(events)
        self.assertEqual(rest[-1], "[DONE]")
        error = json.loads(rest[-2])["error"]
        self.assertEqual((error["code"], error["type"]), ("shutting_down", "server_error"))
        self.assertEqual(server.stop(timeout=30), 0)
        self.assertLess(time.time() - start, 15)


class checkpoint(unittest.TestCase):
    def test_golden_checkpoint(self):
        golden = os.path.join(ARGS.data, "golden", "tiny_fp8_ue8m0_yarn")
        with open(os.path.join(golden, "manifest.json")) as f:
            manifest = json.load(f)
        prompts = manifest["prompts"]
        b = min(range(len(prompts)), key=lambda i: len(prompts[i]))  # alone, the shortest replays the reference
        n, new = len(prompts[b]), manifest["max_new_tokens"]
        expected = manifest["final_tokens"][b][n:n + new]
        server = Server("--model", golden, "--tokenizer", tokenizer_dir())
        try:
            client = server.client()
            model = client.models.list().data[0]
            self.assertEqual(model.id, "tiny_fp8_ue8m0_yarn")
            self.assertEqual(model.max_model_len, 64)
            r = client.completions.create(model=model.id, prompt=prompts[b], max_tokens=new, temperature=0, logprobs=0,
                                          extra_body={"return_tokens_as_token_ids": True})
            self.assertEqual([int(t.split(":")[1]) for t in r.choices[0].logprobs.tokens], expected)
            with self.assertRaises(openai.BadRequestError) as e:  # text ids beyond this model's 512
                client.chat.completions.create(model=model.id, messages=[{"role": "user", "content": "Hello there"}])
            self.assertIn("outside the vocabulary [0, 512)", e.exception.body["message"])
        finally:
            self.assertEqual(server.stop(), 0)

    def test_tokenizer_from_the_model_directory(self):
        golden = os.path.join(ARGS.data, "golden", "tiny_fp8_ue8m0_yarn")
        with tempfile.TemporaryDirectory() as tmp:
            model = os.path.join(tmp, "my-checkpoint")
            os.mkdir(model)
            for name, where in (("config.json", golden), ("model0-mp1.safetensors", golden),
                                ("tokenizer.json", tokenizer_dir()), ("tokenizer_config.json", tokenizer_dir())):
                os.symlink(os.path.abspath(os.path.join(where, name)), os.path.join(model, name))
            server = Server("--model", model + "/")
            try:
                client = server.client()
                self.assertEqual([m.id for m in client.models.list().data], ["my-checkpoint"])
                r = client.completions.create(model="my-checkpoint", prompt=[1, 2, 3], max_tokens=3, temperature=0)
                self.assertEqual(r.usage.completion_tokens, 3)
                deadline = time.time() + 10  # (standard error is read by a thread of its own)
                while "tokenizer " + model not in "".join(server.stderr) and time.time() < deadline:
                    time.sleep(0.05)
                self.assertIn("tokenizer " + model, "".join(server.stderr))
            finally:
                self.assertEqual(server.stop(), 0)


class cli(unittest.TestCase):
    def run_server(self, *args):
        return subprocess.run([ARGS.server, *args], capture_output=True, text=True, timeout=120)

    def test_help_and_bad_arguments(self):
        r = self.run_server("--help")
        self.assertEqual(r.returncode, 0)
        for flag in ("--model", "--random-weights", "--host", "--port", "--api-key", "--served-model-name",
                     "--chat-format", "--cache-memory", "--step-tokens", "--max-running", "--threads", "--bench"):
            self.assertIn(flag, r.stdout)
        for args, message in ((["--bogus"], "unknown argument '--bogus'"), (["--port", "x"], "--port: expects an integer"),
                              (["--port", "70000"], "--port: expects an integer in [0, 65535], got '70000'"),
                              (["--port"], "--port: needs a value"),
                              (["--chat-format", "llama"], "--chat-format: expects"),
                              (["--model", "a", "--random-weights", "demo-fp8"], "not both"),
                              (["--max-running", "8", "--step-tokens", "4"], "--step-tokens (4) must be >= --max-running (8)"),
                              (["--cache-memory", "lots"], "--cache-memory: expects a byte count"),
                              (["--bench", "1,x"], "--bench: expects concurrencies"),
                              (["--api-key", ""], "--api-key: must not be empty")):
            r = self.run_server(*args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(message, r.stderr)

    def test_failures(self):
        r = self.run_server("--model", "/nonexistent/model")
        self.assertEqual(r.returncode, 1)
        self.assertIn("model directory /nonexistent/model does not exist", r.stderr)
        r = self.run_server("--random-weights", "gpt-9")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no config named 'gpt-9'", r.stderr)
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            r = self.run_server("--port", str(taken.getsockname()[1]))
            self.assertEqual(r.returncode, 1)
            self.assertIn("cannot listen on 127.0.0.1:%d" % taken.getsockname()[1], r.stderr)

    def test_served_model_name(self):
        server = Server("--served-model-name", "my-model")
        try:
            self.assertEqual([m.id for m in server.client().models.list().data], ["my-model"])
            with self.assertRaises(openai.NotFoundError):
                server.client().completions.create(model=DEMO, prompt="x")
        finally:
            self.assertEqual(server.stop(), 0)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("group")
    parser.add_argument("--server", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--tokenize", required=True)
    parser.add_argument("--generate", required=True)
    ARGS = parser.parse_args()
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(globals()[ARGS.group])
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)


if __name__ == "__main__":
    main()
