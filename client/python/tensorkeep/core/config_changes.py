"""A count of changes to what the hook saves, for its hot path.

Every change to a ``Collection`` (a regex, a tensor name, a module, its save
or reduction config), to a ``CollectionManager``'s collections and to a
``SaveConfigMode`` (an attribute set, its ``save_steps`` list changed in
place) adds one. The PyTorch hook reads it at each step that saves nothing:
while it is unchanged, the steps that cannot save until the next saving step
it computed are counted and left at once, instead of asking every
collection's save config again (~8 us of a ~0.8 ms step, issue 16).
"""

count = 0


def bump() -> None:
    global count
    count += 1
