"""The policy stage: facts of the code, rules, the policy file, approvals."""
