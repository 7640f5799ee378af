def test_one():
    assert True
