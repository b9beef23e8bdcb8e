"""MathVista testmini under the paper's protocol: data (vendored text + images), prompts, extraction, official
scoring, and the `asymspec-vl eval mathvista` run (resumable; Table 3 layout)."""
