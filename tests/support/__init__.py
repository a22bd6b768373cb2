"""Helpers the tests share: record factories, the loop's fakes at its boundary, a headless browser."""
