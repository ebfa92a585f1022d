"""The Python side of a stoker process device (docs/process-devices.md); standard library only.

A worker program calls ``serve(handle)``. stoker sends it one item at a time over stdin;
``handle(item)`` returns the item's output -- a JSON value, or bytes -- and the helper replies
over stdout with the output and its own measure of the call (``busyNs``: the time the item
occupied this worker, lock waits included). stoker puts this file's folder on the PYTHONPATH of
process devices.

    # device.py, run by stoker as [device.process] command = "python3", args = ["device.py"]
    import stoker_worker

    def handle(item):
        return {"partition": item.partition, "n": len(item.payload or b"")}

    stoker_worker.serve(handle)

stdout carries the protocol: ``serve`` points ``sys.stdout`` (and file descriptor 1) at stderr,
so ``print`` goes to the server's log, prefixed with the worker's name.
"""

import json
import math
import mmap
import os
import re
import signal
import struct
import sys
import threading
import time
from decimal import Decimal

PROTOCOL = 1
# JSON (input, prepared value, output) travels in the header; bytes go as the payload.
MAX_HEADER_BYTES = 64 << 20


class Item:
    """One item: ``job``, ``kind``, ``partition``, ``partitions``, ``input``, ``prepared`` (what
    the kind's prepare returned; None when it returned bytes) and ``payload`` (those bytes, or the
    partition's buffer; None when there are none).

    Large prepared data comes by file instead of through the pipe: then ``path`` names it (a file
    in a memory-backed folder, removed by stoker when the partition ends) and ``payload`` is a
    read-only ``memoryview`` of a map of it -- ``numpy.frombuffer(item.payload, ...)`` reads it
    without a copy either way. Keep no reference to it after ``handle`` returns."""

    __slots__ = ("id", "job", "kind", "partition", "partitions", "input", "prepared", "payload", "path", "_map")

    def __init__(self, header, payload):
        self.id = header.get("id")
        self.job = header.get("job")
        self.kind = header.get("kind")
        self.partition = header.get("partition")
        self.partitions = header.get("partitions")
        self.input = header.get("input")
        self.prepared = header.get("prepared")
        self.payload = payload
        self.path = header.get("payloadPath")
        self._map = None
        if self.path is not None:
            if header.get("payloadPathBytes"):
                with open(self.path, "rb") as f:
                    self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                self.payload = memoryview(self._map)
            else:
                self.payload = b""

    def close(self):
        """Unmaps a payload that came by file (a view still alive keeps it until it goes)."""
        if self._map is None:
            return
        try:
            self.payload.release()
            self._map.close()
        except BufferError:
            pass


def _read_exactly(stream, n):
    chunks = []
    while n > 0:
        chunk = stream.read(n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _read_frame(stream):
    head = _read_exactly(stream, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">I", head)
    if size == 0 or size > MAX_HEADER_BYTES:
        raise ValueError("a frame header length of %d bytes" % size)
    header = json.loads(_read_exactly(stream, size).decode("utf-8"))
    n = header.get("payloadBytes", 0)
    payload = _read_exactly(stream, n) if n > 0 else None
    return header, payload


class FrameTooLarge(ValueError):
    """A header over MAX_HEADER_BYTES (nothing was written)."""


class InexactInteger(ValueError):
    """An integer that stoker would read rounded (nothing was written)."""


# 16 digits where a number starts (the header is written without spaces: after [ , or :): only
# then are the header's integers looked at one by one. (A float's digits follow a point; a
# string's digits, in "ids", a quote. Looser, the scan cost a third of the dumps of 1M floats.)
_LONG_INTEGER = re.compile(rb"[\[,:]-?[0-9]{16}")


def _inexact_int(value, path):
    """Where an integer that stoker would read rounded is in ``value`` (its path and the
    integer), or None: stoker reads JSON numbers as JavaScript numbers, doubles. Not one a double
    holds (2**60), nor the digits JavaScript writes for a double (1152921504606847000 for 2**60:
    what stoker sent as a prepared value, or an input, and reads back as it was)."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            f = float(value)
            # (JavaScript writes a double below 1e21 with the shortest digits that read back as it, as repr does.)
            exact = abs(value) <= 2**53 or int(f) == value or (abs(f) < 1e21 and int(Decimal(repr(f))) == value)
        except OverflowError:  # beyond a double's range
            exact = False
        return None if exact else (path, value)
    if isinstance(value, dict):
        for k, v in value.items():
            found = _inexact_int(v, "%s.%s" % (path, k) if path else str(k))
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _inexact_int(v, "%s[%d]" % (path, i))
            if found:
                return found
    return None


def _write_frame(stream, header, payload=None):
    if payload is not None:
        header = dict(header, payloadBytes=len(payload))
    data = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("utf-8")
    found = _LONG_INTEGER.search(data) and _inexact_int(header, "")
    if found:
        # (JSON.parse on stoker's side would round it, silently: an int64 id 2**64 + 1 came back as
        # 18446744073709552000.)
        try:
            read = "read rounded to %d" % int(float(found[1]))
        except OverflowError:
            read = "not read (beyond a double's range)"
        e = InexactInteger("%s is the integer %s, which stoker would %s — JSON numbers are doubles there, whole numbers exact to 2**53: return it as a string, str(x)" % (found[0], found[1] if abs(found[1]) < 10**40 else "of %d digits" % len(str(abs(found[1]))), read))
        e.retry = False
        raise e
    if len(data) > MAX_HEADER_BYTES:
        e = FrameTooLarge("its JSON is %d bytes, over the %d bytes a frame header carries: return large data as bytes, which go as the payload" % (len(data), MAX_HEADER_BYTES))
        e.retry = False
        raise e
    stream.write(struct.pack(">I", len(data)))
    stream.write(data)
    if payload is not None:
        stream.write(payload)
    stream.flush()


def _not_json(value, path):
    """Where a value JSON cannot carry is in ``value`` (its path and what it is), or None."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 14000:
        # (Past Python's limit on an int's text, 4,300 digits, json.dumps raised and this said only "output".)
        return (path, "an integer of about %d digits, more than Python writes as text (return it as a string: sys.set_int_max_str_digits(0), then str(x))" % int(value.bit_length() * 0.30103))
    if value is None or isinstance(value, (bool, str, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, repr(value))
    if isinstance(value, dict):
        for k, v in value.items():
            if not (k is None or isinstance(k, (str, int, float, bool))):
                return (path, "a dict with the key %r (JSON keys are strings; json turns numbers, booleans and None into them)" % (k,))
            found = _not_json(v, "%s.%s" % (path, k))
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _not_json(v, "%s[%d]" % (path, i))
            if found:
                return found
        return None
    name = type(value).__name__
    if type(value).__module__ == "numpy":
        # (np.bool_ read "a bool", which JSON carries: say it is numpy's, and how to make it Python's.)
        return (path, "a numpy %s (%s)" % (name, ".tolist(), or its .tobytes() returned alone as the output" if name == "ndarray" else ".item() makes it Python's"))
    return (path, "%s %s" % ("an" if name[:1] in "aeiou" else "a", name))


def _reply(out, id, output, extra):
    if isinstance(output, (bytes, bytearray, memoryview)):
        _write_frame(out, dict({"type": "result", "id": id, "ok": True, "bytes": True}, **extra), bytes(output))
        return
    try:
        _write_frame(out, dict({"type": "result", "id": id, "ok": True, "output": output}, **extra))
    except (FrameTooLarge, InexactInteger):
        raise
    except (TypeError, ValueError):
        # (Nothing was written: the header is encoded before a byte goes out.) Where, for the message;
        # the same output again would fail the same way: no retry.
        found = _not_json(output, "output") or ("output", "not JSON")
        e = ValueError("%s is %s, which JSON cannot carry: return numbers, strings, lists and dicts (a numpy array: .tolist(); NaN: None), or bytes" % found)
        e.retry = False
        raise e


def _failed(header, e):
    """A failed result's header for exception ``e``; ``"retry": false`` when it has ``retry = False``
    (the item would fail the same way again: its job fails at once)."""
    header = dict(header, ok=False, error="%s: %s" % (type(e).__name__, e))
    if getattr(e, "retry", None) is False:
        header["retry"] = False
    return header


def _run_batch(out, handle, handle_batch, headers, payloads):
    """A batch's items at once: one result per item (an Exception in an item's place fails it alone)."""
    t0 = time.perf_counter_ns()
    items = []
    try:
        items = [Item(h, p) for h, p in zip(headers, payloads)]
        if handle_batch is not None:
            outputs = list(handle_batch(items))
        else:
            outputs = []
            for item in items:
                try:
                    outputs.append(handle(item))
                except Exception as e:  # that item alone fails
                    outputs.append(e)
        if len(outputs) != len(items):
            raise ValueError("handle_batch returned %d outputs for %d items: return one per item, in order" % (len(outputs), len(items)))
        busy = time.perf_counter_ns() - t0
        for index, output in enumerate(outputs):
            if isinstance(output, BaseException):
                _write_frame(out, _failed({"type": "result", "id": headers[0].get("id"), "index": index, "busyNs": busy}, output))
            else:
                try:
                    _reply(out, headers[0].get("id"), output, {"index": index, "busyNs": busy})
                except ValueError as e:  # an output JSON cannot carry fails its item alone
                    _write_frame(out, _failed({"type": "result", "id": headers[0].get("id"), "index": index, "busyNs": busy}, e))
    except Exception as e:  # the whole batch fails: stoker runs its items again alone
        _write_frame(out, {"type": "result", "id": headers[0].get("id"), "ok": False, "busyNs": time.perf_counter_ns() - t0, "error": "%s: %s" % (type(e).__name__, e)})
    finally:
        for item in items:
            item.close()


def serve(handle, handle_batch=None):
    """Serves items with ``handle(item)`` until stdin ends (the server closes it on shutdown).

    On a device that batches (``[device.batch]``) the items of a batch come together:
    ``handle_batch(items)`` gets them at once and returns one output per item, in order (an
    Exception in an item's place fails that item alone; raising fails the batch, whose items then
    run again alone). Without ``handle_batch`` a batch's items go through ``handle`` one after
    another. Each batch is timed once."""
    # A signal to the server's whole process group — a Ctrl-C in its terminal, systemd's stop
    # (KillMode=control-group), a closed terminal — is the server's to act on (it finishes the items
    # in flight, then closes stdin), not an end mid-item (SIGTERM killed every worker mid-item and
    # the drain had nothing to finish). The server ends a worker by closing stdin, else SIGKILL.
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        try:
            signal.signal(sig, signal.SIG_IGN)
        except ValueError:  # not the main thread: left as it is
            pass
    # A server killed hard (kill -9) closes stdin, which ends the loop below — but not an item that
    # runs on (a hung kernel holding its GPU memory beside the workers of the restarted server):
    # once the parent is gone (the parent pid changes) the worker ends, mid-item if need be.
    parent = os.getppid()

    def _watch_parent():
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(70)

    threading.Thread(target=_watch_parent, name="stoker-parent-watch", daemon=True).start()
    # The protocol's own stdout; everything else printed goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    stdin = sys.stdin.buffer
    _write_frame(out, {"type": "ready", "protocol": PROTOCOL, "runtime": "python %d.%d" % sys.version_info[:2]})
    batch = ([], [])
    while True:
        frame = _read_frame(stdin)
        if frame is None:
            return
        header, payload = frame
        if header.get("type") != "item":
            continue
        if header.get("batch") is not None:
            batch[0].append(header)
            batch[1].append(payload)
            if len(batch[0]) == header["batch"]["size"]:
                _run_batch(out, handle, handle_batch, *batch)
                batch = ([], [])
            continue
        t0 = time.perf_counter_ns()
        item = None
        try:
            item = Item(header, payload)
            result = handle(item)
            _reply(out, header.get("id"), result, {"busyNs": time.perf_counter_ns() - t0})
        except Exception as e:  # the item fails, the worker goes on
            busy = time.perf_counter_ns() - t0
            _write_frame(out, _failed({"type": "result", "id": header.get("id"), "busyNs": busy}, e))
        finally:
            if item is not None:
                item.close()
