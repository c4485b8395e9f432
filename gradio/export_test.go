package gradio

// HangUpDropsQueued exposes hangUpDropsQueued to the external tests.
var HangUpDropsQueued = hangUpDropsQueued
