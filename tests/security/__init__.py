"""The hostile suite: one test per way a stranger misused the server (issue 31), each driving the real server
the way an attacker would."""
