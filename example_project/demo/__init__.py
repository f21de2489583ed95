"""The demo app: three scheduled tasks, the model one of them writes, and the demo commands."""
