"""The ``ppocr`` model: encoded image bytes -> the text lines in it, as JSON (``search.triton.steps.ppocr``,
configured by ppocr.json), calling the detector, classifier and recogniser its config names ("calls")
through Business Logic Scripting. One bad image fails its own request (INVALID_ARG naming it), never the batch."""

import json
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace

import numpy as np
from PIL import Image

from search.triton.steps import backend, ppocr
from search.triton.steps.requests import where

ROLES = ("det", "cls", "rec")  # the order of the config's "calls"


class TritonPythonModel:
    def initialize(self, args):
        sizes = {k: tuple(int(x) for x in backend.parameter(args, k, "").split(",") if x.strip())
                 for k in ("det_buckets", "rec_widths")}  # fixed shapes: the GPU config sets them
        self.cfg = replace(ppocr.config_from_json(backend.read_json(args, "ppocr.json")),
                           max_pixels=int(backend.parameter(args, "max_pixels")), **sizes)
        Image.MAX_IMAGE_PIXELS = self.cfg.max_pixels  # Pillow's own guard at the same limit
        self.models = dict(zip(ROLES, backend.parameter(args, "calls").split(","), strict=True))
        # A page's classifier and recogniser batches go out this many at a time (BLS calls from threads,
        # as async_exec makes them): one page keeps both recogniser instances busy, not one.
        self.in_flight = int(backend.parameter(args, "in_flight", "2"))
        self.pool = ThreadPoolExecutor(max_workers=self.in_flight, thread_name_prefix="bls")

    def _infer(self, role: str, batch: np.ndarray) -> np.ndarray:
        return backend.infer(self.models[role], {"x": batch}, ["y"])["y"]

    def _infer_all(self, role: str, batches) -> list[np.ndarray]:
        """The batches' outputs in order, at most ``in_flight`` of them asked at once; the next batch is
        prepared while they run."""
        pending, out = deque(), []
        for batch in batches:
            if len(pending) == self.in_flight:
                out.append(pending.popleft().result())
            pending.append(self.pool.submit(self._infer, role, batch))
        out.extend(f.result() for f in pending)
        return out

    def execute(self, requests):
        return backend.execute_each(requests, self._one)

    def _one(self, request):
        images = backend.column(request, "IMAGE")
        as_read = backend.tensor(request, "AS_READ")  # optional: RapidOCR's own reading where left out
        flags = np.zeros(len(images), bool) if as_read is None else np.broadcast_to(as_read.reshape(-1), len(images))
        out = []
        for k, data in enumerate(images):
            try:
                lines = ppocr.run(bytes(data), self._infer, self.cfg, as_read=bool(flags[k]),
                                  infer_all=self._infer_all)
            except ppocr.BadImage as exc:
                raise ppocr.BadImage(f"IMAGE: {where(k, len(images), 'image')}{exc}") from None
            out.append(json.dumps([asdict(line) for line in lines], ensure_ascii=False))
        return {"LINES": np.array(out, dtype=np.object_).reshape(-1, 1)}

    def finalize(self):
        self.pool.shutdown(wait=True)
