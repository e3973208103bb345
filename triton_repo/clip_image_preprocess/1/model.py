"""Preprocessing step of the ``clip_image`` ensemble: encoded image bytes -> normalised pixels
(``search.triton.steps.clip_image``, configured by preprocess.json). One bad image fails its own
request (INVALID_ARG naming it), never the batch or the instance."""

from PIL import Image

from search.triton.steps import backend, clip_image


class TritonPythonModel:
    def initialize(self, args):
        self.max_pixels = int(backend.parameter(args, "max_pixels"))
        Image.MAX_IMAGE_PIXELS = self.max_pixels  # Pillow's own guard (frames, plugins) at the same limit
        self.cfg = backend.read_json(args, "preprocess.json")

    def execute(self, requests):
        return backend.execute_each(requests, self._one)

    def _one(self, request):
        images = backend.column(request, "IMAGE")
        return {"pixel_values": clip_image.preprocess_all(images, self.cfg, self.max_pixels)}
