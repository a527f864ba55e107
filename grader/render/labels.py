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
        # the report's summary, navigation and pictures (grader/render/pictures.py)
        "summary": "Summary", "score": "Score", "back_to_top": "Back to the summary",
        "only_problems": "only show what did not pass", "loss_curve": "Loss curve",
        "step": "step", "loss_log": "loss (log scale)", "threshold": "threshold", "optimum": "optimum",
        "final": "final", "tolerance": "tolerance", "prefix_position": "position t (the input after t was changed)",
        "change_log": "largest change at ≤ t (log)", "yours": "yours", "expected": "expected",
        "key_axis": "key →", "query_axis": "query →", "channel": "channel",
    },
    "zh": {
        "report": "评分报告", "submission": "提交", "total": "总分", "exercise": "练习",
        "criterion": "评分项", "kind": "类别", "points": "得分", "status": "状态", "message": "观察结果",
        "hint": "排查方向", "evidence": "证据", "sandbox": "沙箱", "seed": "随机种子", "grader": "评分器",
        "torch": "PyTorch", "graded_at": "评分时间", "duration": "耗时", "output": "程序输出（末尾）",
        "criteria_passed": "项通过", "run": "运行", "limit": "触发的限制",
        "passed": "通过", "failed": "未通过", "error": "报错", "not_attempted": "未作答",
        "timeout": "超时", "crashed": "崩溃", "blocked": "受阻", "grader_error": "评分器故障",
        # 报告的摘要、导航与图（grader/render/pictures.py）
        "summary": "摘要", "score": "得分率", "back_to_top": "返回摘要",
        "only_problems": "只看未通过的项", "loss_curve": "损失曲线",
        "step": "步数", "loss_log": "损失（对数刻度）", "threshold": "阈值", "optimum": "最优值",
        "final": "最终", "tolerance": "容差", "prefix_position": "位置 t（改变 t 之后的输入）",
        "change_log": "t 及之前的最大变化（对数）", "yours": "你的结果", "expected": "期望结果",
        "key_axis": "key →", "query_axis": "query →", "channel": "通道",
    },
}

STATUS_MARK = {"passed": "✅", "failed": "❌", "error": "💥", "not_attempted": "⬜", "timeout": "⏱️",
               "crashed": "💀", "blocked": "⛔", "grader_error": "⚠️"}
