#!/usr/bin/python3
"""tools/tpplot: what it reads from tpbench --json (as written by tpbench itself, plain or under
tprun's rank prefixes) and from the peers' result lines, the series it draws (medians of
repeated runs), its errors, and the PNG. Usage: tpplot_test.py SOURCE_DIR BIN_DIR"""
import json
import struct
import os
import subprocess
import sys
import tempfile
import unittest

SRC, BIN = sys.argv[1], sys.argv[2]
TPPLOT = os.path.join(SRC, "tools", "tpplot")


def run(*args):
    p = subprocess.run([TPPLOT, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def measure(t, bw):
    return {"time_us": t, "algbw": bw, "busbw": bw, "wrong": 0}


class TpplotTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def sweep(self):
        doc = {"tpbench": {"nranks": 2, "transport": "shm", "iters": 5, "warmup": 1,
                           "samples": 1, "check": True, "algorithm": ""},
               "results": [
                   {"op": "allreduce", "size": 8, "count": 2, "type": "float32",
                    "redop": "sum", "root": -1, "algorithm": "ring",
                    "out_of_place": measure(2.5, 0.0032), "in_place": measure(2.0, 0.004)},
                   {"op": "broadcast", "size": 1024, "count": 256, "type": "float32",
                    "redop": "none", "root": 0, "algorithm": "tree",
                    "out_of_place": None, "in_place": measure(3.0, 0.3413)}],
               "avg_busbw": 0.1, "wrong": 0}
        return json.dumps(doc, indent=1)

    def test_reads_tpbench_json_plain_and_under_tprun(self):
        plain = self.write("a.json", self.sweep())
        prefixed = self.write("b.json", "".join(
            "[rank 0]: %s\n" % line for line in self.sweep().splitlines()) +
            "[rank 1]: noise from another rank\n")
        want = ("allreduce tpcomm-shm 8 2.500 0.0032\n"
                "broadcast tpcomm-shm 1024 3.000 0.3413\n")
        for path in (plain, prefixed):
            self.assertEqual(run("--dump", path), (0, want, ""))
        self.assertEqual(run("--dump", "--place", "ip", plain),
                         (0, "allreduce tpcomm-shm 8 2.000 0.0040\n"
                             "broadcast tpcomm-shm 1024 3.000 0.3413\n", ""))

    def test_peer_lines_merge_runs_by_median_and_filter_ops(self):
        head = "# peer=mpi-shm nranks=2\n# PEER OP BYTES TIME_US ALGBW_GBps BUSBW_GBps\n"
        for i, (t, bw) in enumerate(((1.0, 1.0), (3.0, 3.0), (2.0, 9.0))):
            self.write("mpi-shm.run%d.txt" % i,
                       head + "mpi-shm allreduce 8 %s %s %s\n" % (t, bw, bw) +
                       "mpi-shm allgather 8 5.0 1.0 1.0\n")
        self.write("meta.txt", "META load 0.1\n")
        self.assertEqual(run("--dump", "--op", "allreduce", self.dir),
                         (0, "allreduce mpi-shm 8 2.000 3.0000\n", ""))

    def test_bad_input_fails_naming_the_file(self):
        bad = self.write("bad.txt", "mpi-shm allreduce 8 1.0\n")
        rc, out, err = run("--dump", bad)
        self.assertEqual((rc, out), (1, ""))
        self.assertIn("bad.txt:1: expected 'PEER OP BYTES TIME_US ALGBW BUSBW'", err)
        other = self.write("other.json", '{"benchmarks": []}')
        rc, out, err = run("--dump", other)
        self.assertEqual(rc, 1)
        self.assertIn("not tpbench --json output", err)
        empty = self.write("empty.txt", "# nothing\n")
        self.assertEqual(run("--dump", empty)[0], 1)
        self.assertEqual(run("--dump", os.path.join(self.dir, "missing.json"))[0], 1)

    def test_reads_what_tpbench_writes(self):
        out = subprocess.run([os.path.join(BIN, "tpbench"), "--threads", "2", "-b", "8", "-e",
                              "64", "-f", "8", "-n", "2", "-w", "0", "--json"],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        doc = json.loads(out.stdout)
        path = self.write("tpbench.json", out.stdout)
        rc, dump, err = run("--dump", path)
        self.assertEqual((rc, err), (0, ""))
        label = "tpcomm-" + doc["tpbench"]["transport"]
        want = "".join("%s %s %d %.3f %.4f\n" % (r["op"], label, r["size"],
                                                  r["out_of_place"]["time_us"],
                                                  r["out_of_place"]["busbw"])
                       for r in doc["results"])
        self.assertEqual(dump, want)
        self.assertEqual(len(doc["results"]), 2)

    def test_draws_a_png(self):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("python3-matplotlib is not installed (tools/setup.sh installs it)")
        src = self.write("a.json", self.sweep())
        png = os.path.join(self.dir, "out.png")
        self.assertEqual(run("-o", png, "--title", "t", src), (0, "tpplot: wrote %s\n" % png, ""))
        with open(png, "rb") as f:
            data = f.read()
        self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n")
        # IHDR: 11 x 3.6 inches per operation (two here) at 80 dpi.
        self.assertEqual(struct.unpack(">4sII", data[12:24]), (b"IHDR", 880, 576))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
