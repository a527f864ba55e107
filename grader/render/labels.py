"""Interface words of the rendered reports, in both languages."""

LABELS = {
    "en": {
        "report": "Grading report", "submission": "Submission", "total": "Total", "exercise": "Exercise",
        "criterion": "Criterion", "kind": "Kind", "points": "Points", "status": "Status", "message": "What was observed",
        "hint": "Where to look", "evidence": "Evidence", "sandbox": "Sandbox", "seed": "Seed", "grader": "Grader",
        "torch": "PyTorch", "graded_at": "Graded at", "duration": "Duration", "output": "Your program's output (last lines)",
        "criteria_passed": "criteria passed", "run": "Run", "limit": "Limit hit",
        "passed": "passed", "failed": "failed", "error": "error", "not_attempted": "not attempted",
        "timeout": "timeout", "crashed": "crashed", "blocked": "blocked", "grader_error": "grader error",
    },
    "zh": {
        "report": "评分报告", "submission": "提交", "total": "总分", "exercise": "练习",
        "criterion": "评分项", "kind": "类别", "points": "得分", "status": "状态", "message": "观察结果",
        "hint": "排查方向", "evidence": "证据", "sandbox": "沙箱", "seed": "随机种子", "grader": "评分器",
        "torch": "PyTorch", "graded_at": "评分时间", "duration": "耗时", "output": "程序输出（末尾）",
        "criteria_passed": "项通过", "run": "运行", "limit": "触发的限制",
        "passed": "通过", "failed": "未通过", "error": "报错", "not_attempted": "未作答",
        "timeout": "超时", "crashed": "崩溃", "blocked": "受阻", "grader_error": "评分器故障",
    },
}

STATUS_MARK = {"passed": "✅", "failed": "❌", "error": "💥", "not_attempted": "⬜", "timeout": "⏱️",
               "crashed": "💀", "blocked": "⛔", "grader_error": "⚠️"}
