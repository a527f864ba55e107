"""Criteria shared by several exercises."""

from grader.i18n import t, verbatim
from grader.judge.criterion import criterion
from grader.judge.verdicts import NotAttempted


def forbidden_api_criterion():
    """The `api` criterion: no forbidden operator reached torch's dispatcher, and no forbidden class or function
    was called, while the exercise's code ran (whatever name or file the call came from).

    It is not attempted until every part of the exercise is written (no probe reached NotImplementedError) and
    some function returned (the judge's plugin), so that a stub, a half-written file or one whose every function
    raises earns nothing here for the calls it has not made.
    """

    @criterion("no_forbidden_api", kind="api",
               title=t("Written by hand: no forbidden library call"),
               hint=t("The exercise asks you to build this yourself from tensor operations; replace the named call "
                      "with your own code."))
    def test_no_forbidden_api(obs, verdict):
        obs.probe("_import")
        if not obs.fully_attempted():
            raise NotAttempted(t("judged once every part of the exercise is written: some of it still raises "
                                 "NotImplementedError"))
        calls = obs.forbidden_calls()
        verdict.note(calls=calls)
        if calls:
            first = calls[0]
            where = (t("at {where}", where=verbatim(first["where"])) if first["where"]
                     else t("from code outside your file's own lines"))
            said = t("your code calls the forbidden `{call}` {where}", call=verbatim(first["call"]), where=where)
            if len(calls) > 1:
                said = t("{said} (and {more} more forbidden calls)", said=said, more=len(calls) - 1)
            verdict.fail(said)
        verdict.ok(t("no forbidden API was called while your code ran"))

    return test_no_forbidden_api
