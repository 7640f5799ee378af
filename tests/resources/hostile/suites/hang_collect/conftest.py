"""A collection that never ends: the hook sleeps ten minutes after the modules are collected."""

import time


def pytest_collection_modifyitems(items):
    time.sleep(600)
