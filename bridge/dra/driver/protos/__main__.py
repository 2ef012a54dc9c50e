"""`python -m bridge.dra.driver.protos`: regenerate the `_pb2` modules from the `.proto` files."""

from bridge.dra.driver.protos import HERE, generate

for path in generate(HERE):
    print(path)
