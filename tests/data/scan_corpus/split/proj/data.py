"""DataLoader options shared by the project."""


def loader_options():
    return {"num_workers": 0}
