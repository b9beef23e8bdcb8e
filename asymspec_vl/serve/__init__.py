"""`asymspec-vl serve`: an OpenAI-compatible chat server. A conversation with images in its user turns in; the
answer the image-reading drafter steered out, with the AsymSpec statistics beside it.

  cli.py          the command: flags -> ServeSettings, uvicorn
  server.py       uvicorn as serve runs it: header / body timeouts, a connection bound, the drain after SIGTERM
  settings.py     ServeSettings: models, engine options, per-request limits
  app.py          the FastAPI app: routes, API key, body cap, loading state, errors
  translate.py    a ChatCompletionRequest -> a ChatJob (turns, image URLs, method, AsymSpecConfig); refusals
  media.py        an image_url -> the image (data: URLs; http(s) and files only where allowed), capped
  captioning.py   the verifier's view: the client's caption / OCR, or the server's captioners behind a cache
  chat.py         one completion: prepare (fetch, caption, encode, fit), decode, answer or stream
  runner.py       what a backend gives the server; vllm_runner.py (AsyncLLM engines), hf_runner.py (transformers)
  responses.py    the OpenAI response and chunk objects, usage, the asymspec object
  metrics.py      Prometheus metrics
  http_errors.py  the server's typed errors and their HTTP status
"""
