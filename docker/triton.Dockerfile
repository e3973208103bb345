# Triton for the GPU host: the official 24.10 container (tritonserver 2.51.0, the same server the
# nvidia-pytriton wheel runs locally) plus what the model repository's Python steps import.
FROM nvcr.io/nvidia/tritonserver:24.10-py3

# tokenizers (the text steps), Pillow and pillow-heif (the image steps; HEIC photos as the indexer
# reads them), OpenCV, pyclipper and shapely (the OCR step, as RapidOCR computes), numpy<2 (numpy 2
# in the python backend's environment empties every output). Versions as in pyproject.toml.
RUN python3 -m pip install --no-cache-dir "numpy<2" "tokenizers>=0.20" "pillow>=10" "pillow-heif>=0.16" \
    "opencv-python-headless==4.11.0.86" "pyclipper>=1.3" "shapely>=2"

# The steps' shared code (search.triton.steps) with its two empty parent packages, nothing else of search.
COPY search/__init__.py /opt/search/lib/search/__init__.py
COPY search/triton/__init__.py /opt/search/lib/search/triton/__init__.py
COPY search/triton/steps/ /opt/search/lib/search/triton/steps/
# A .pth beside the packages pip installed: the python backend's stub runs isolated (PYTHONPATH ignored).
# Then every step module is imported once (backend needs the stub's triton_python_backend_utils).
RUN site="$(python3 -c 'import os, tokenizers; print(os.path.dirname(os.path.dirname(tokenizers.__file__)))')" \
 && echo /opt/search/lib > "$site/search_steps.pth" \
 && python3 -I -c "import importlib, pkgutil, search.triton.steps as s; [importlib.import_module(s.__name__ + '.' + m.name) for m in pkgutil.iter_modules(s.__path__) if m.name != 'backend']"

COPY docker/triton-start.sh /opt/search/triton-start.sh
ENV TRITON_MODEL_REPOSITORY=/models TRITON_MODEL_CONFIG=gpu
EXPOSE 8000 8001 8002
HEALTHCHECK --interval=15s --timeout=5s --start-period=600s --retries=3 \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/v2/health/ready', timeout=4)"]
ENTRYPOINT ["/opt/search/triton-start.sh"]
