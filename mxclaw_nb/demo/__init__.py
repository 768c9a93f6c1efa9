"""The offline demo: the local OpenAI-compatible server, the scripted model, the sample workspace."""
