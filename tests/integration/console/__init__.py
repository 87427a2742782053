"""The live status page (`router console`) in headless Chromium against a running pipeline."""
