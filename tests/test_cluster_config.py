"""TF_CONFIG's mistakes are one line each (`cluster_config.parse`, no TensorFlow)."""
import json

import pytest

from t2t_lite.errors import UserError
from t2t_lite.training.cluster_config import parse

CLUSTER = {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}


def _config(**task):
    return json.dumps({"cluster": CLUSTER, "task": task})


def test_a_good_tf_config_and_none_at_all():
    assert parse(None) == {} and parse("  ") == {}
    assert parse(_config(type="worker", index=1)) == {
        "cluster": CLUSTER, "task": {"type": "worker", "index": 1}}
    assert parse(_config(type="worker", index="1"))["task"]["index"] == "1"


@pytest.mark.parametrize("text, message", [
    ('{"cluster": {"worker": ["127.0.0.1:2222"]', ("TF_CONFIG is not valid JSON (Expecting ',' "
     "delimiter at line 1 column 42): set it as e.g. {\"cluster\": {\"worker\": "
     "[\"host1:2222\", \"host2:2222\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}")),
    ("[1]", "TF_CONFIG must be a JSON object, not list: set it as e.g. "),
    (_config(type="worker", index=2), ("TF_CONFIG's task index 2 is out of range: its cluster "
     "lists 2 worker task(s), index 0 to 1")),
    (_config(type="worker", index=-1), "TF_CONFIG's task index -1 is out of range"),
    (_config(type="chief", index=0), ("TF_CONFIG's task type \"chief\" is not a job of its "
     "cluster (worker)")),
    (json.dumps({"cluster": {"chief": ["h:1"], "worker": ["h:2", "h:1"]}}),
     ("TF_CONFIG lists the address h:1 twice (chief 0 and worker 1): give every task its own "
     "port")),
    (json.dumps({"cluster": {"worker": ["h:2", "h"]}}),
     "TF_CONFIG's worker 1 address \"h\" is not \"host:port\" (a port from 1 to 65535)"),
    (json.dumps({"cluster": {"worker": "h:2"}}),
     "TF_CONFIG's cluster job 'worker' must be a list of \"host:port\" addresses, not \"h:2\""),
])
def test_tf_config_mistakes_are_one_line(text, message):
    with pytest.raises(UserError) as error:
        parse(text)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)
