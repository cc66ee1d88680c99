"""Talking to live clusters and AWS, and rehearsing a deploy locally: the operations tools."""
