"""Interface words of the rendered reports, in both languages (sentences go through `grader.i18n.t` instead).

Every status an exercise can have (grader.report.model.EXERCISE_STATUSES: a criterion's, and `partial`) and every
criterion kind (grader.judge.criterion.KINDS, as `kind_<kind>`) has a label in each language; tests/test_labels.py
keeps the two languages' keys the same."""

LABELS = {
    "en": {
        "report": "Grading report", "submission": "Submission", "total": "Total", "exercise": "Exercise",
        "criterion": "Criterion", "kind": "Kind", "points": "Points", "status": "Status",
        "message": "What was observed",
        "hint": "Where to look", "evidence": "Evidence", "sandbox": "Sandbox", "grader": "Grader",
        "torch": "PyTorch", "graded_at": "Graded at", "duration": "Duration",
        "output": "Your program's output (last lines)",
        "criteria_passed": "criteria passed", "run": "Run", "limit": "Limit hit",
        "passed": "passed", "failed": "failed", "error": "error", "not_attempted": "not attempted",
        "timeout": "timeout", "crashed": "crashed", "blocked": "blocked", "grader_error": "grader error",
        "partial": "partial",
        # the report's summary, navigation and pictures (grader/render/pictures.py)
        "summary": "Summary", "score": "Score", "back_to_top": "Back to the summary",
        "only_problems": "only show what did not pass", "loss_curve": "Loss curve",
        "step": "step", "loss_log": "loss (log scale)", "threshold": "threshold", "optimum": "optimum",
        "final": "final", "tolerance": "tolerance", "prefix_position": "position t (the input after t was changed)",
        "change_log": "largest change at ≤ t (log)", "yours": "yours", "expected": "expected",
        "key_axis": "key →", "query_axis": "query →", "channel": "channel",
        # criterion kinds, the terminal table, Gradescope, JUnit and `grader check`
        "kind_shape": "shape", "kind_values": "values", "kind_gradient": "gradient", "kind_causality": "causality",
        "kind_registration": "registration", "kind_optimizer": "optimizer", "kind_overfit": "overfitting",
        "kind_resume": "resuming", "kind_param_count": "parameter count", "kind_errors": "error handling",
        "kind_api": "forbidden calls", "kind_determinism": "determinism",
        "reports_written": "Reports", "public_tests": "public tests",
        "visible_criteria": "visible criteria", "visible_scorecard": "Visible scorecard", "result": "Result",
        "colon": ": ",   # after a label: Chinese text takes the full-width colon
        "list_separator": ", ",   # between the items of a list: Chinese takes the enumeration comma
        # the grade after grading (grader.batch.grades): overrides and lateness
        "grade": "Grade", "lateness": "Lateness", "overrides": "The instructor's corrections",
        "whole_grade": "the whole grade", "graded_points": "graded", "instructor_points": "now",
        "comment": "comment", "by": "by", "not_applied": "not applied", "overridden": "corrected by the instructor",
        # written answers (grader/grading/answers.py): carried until a reviewer grades them
        "written_answers": "Written answers", "awaiting_review": "awaiting review", "unanswered": "no answer",
        "graded": "graded", "reviewer": "graded by", "rubric": "Rubric items applied",
    },
    "zh": {
        "report": "评分报告", "submission": "提交", "total": "总分", "exercise": "练习",
        "criterion": "评分项", "kind": "类别", "points": "得分", "status": "状态", "message": "观察结果",
        "hint": "排查方向", "evidence": "证据", "sandbox": "沙箱", "grader": "评分器",
        "torch": "PyTorch", "graded_at": "评分时间", "duration": "耗时", "output": "程序输出（末尾）",
        "criteria_passed": "项通过", "run": "运行", "limit": "触发的限制",
        "passed": "通过", "failed": "未通过", "error": "报错", "not_attempted": "未作答",
        "timeout": "超时", "crashed": "崩溃", "blocked": "受阻", "grader_error": "评分器故障",
        "partial": "部分得分",
        # 报告的摘要、导航与图（grader/render/pictures.py）
        "summary": "摘要", "score": "得分率", "back_to_top": "返回摘要",
        "only_problems": "只看未通过的项", "loss_curve": "损失曲线",
        "step": "步数", "loss_log": "损失（对数刻度）", "threshold": "阈值", "optimum": "最优值",
        "final": "最终", "tolerance": "容差", "prefix_position": "位置 t（改变 t 之后的输入）",
        "change_log": "t 及之前的最大变化（对数）", "yours": "你的结果", "expected": "期望结果",
        "key_axis": "key →", "query_axis": "query →", "channel": "通道",
        # criterion kinds, the terminal table, Gradescope, JUnit and `grader check`
        "kind_shape": "形状", "kind_values": "数值", "kind_gradient": "梯度", "kind_causality": "因果性",
        "kind_registration": "参数注册", "kind_optimizer": "优化器", "kind_overfit": "过拟合",
        "kind_resume": "断点续训", "kind_param_count": "参数量", "kind_errors": "错误处理",
        "kind_api": "禁用调用", "kind_determinism": "确定性",
        "reports_written": "报告", "public_tests": "公开测试",
        "visible_criteria": "可见评分项", "visible_scorecard": "可见评分卡", "result": "结果",
        "colon": "：",
        "list_separator": "、",
        "grade": "成绩", "lateness": "迟交", "overrides": "教师的修改",
        "whole_grade": "总成绩", "graded_points": "评分所得", "instructor_points": "现为",
        "comment": "说明", "by": "修改人", "not_applied": "未生效", "overridden": "经教师修改",
        "written_answers": "书面回答", "awaiting_review": "待批阅", "unanswered": "未作答",
        "graded": "已批阅", "reviewer": "批阅人", "rubric": "采用的评分细则",
    },
}

STATUS_MARK = {"passed": "✅", "failed": "❌", "error": "💥", "not_attempted": "⬜", "timeout": "⏱️",
               "crashed": "💀", "blocked": "⛔", "grader_error": "⚠️", "partial": "🟨"}

# Interface words of the class report (class.html), for the instructor.
CLASS_LABELS = {
    "en": {
        "class_report": "Class report", "submissions": "Submissions", "counted": "In the statistics",
        "mean": "Mean", "median": "Median", "students": "Students", "submission": "Submission", "total": "Total",
        "status": "Status", "report": "report", "no_report": "no report", "no_submissions": "No submissions yet.",
        "distribution": "Score distribution", "histogram": "Number of submissions by total score",
        "left_out": "Left out of the distribution, mean and median (no verdict on the student's work)",
        "left_out_none": "Every submission is counted.",
        "exercises": "Exercises", "exercise": "Exercise", "mean_points": "Mean points", "full_marks": "Full marks",
        "not_attempted": "Not attempted", "most_failed": "Criteria failed most often", "criterion": "Criterion",
        "failed": "Failed", "common_message": "Most common message", "no_failures": "No criterion was failed.",
        "all_criteria": "Pass rate of every criterion", "passed": "Passed",
        "complete": "complete", "partial": "partial", "empty": "empty", "unreadable": "unreadable",
        "grader_error": "grader error", "killed_workers": "killed workers", "missing": "missing",
        "student": "Student", "not in roster": "not in roster", "ambiguous": "fits several students",
        # the student table's cells and flags, the "needs help" list, who failed each criterion
        "cell_passed": "full marks", "cell_partial": "some points", "cell_failed": "tried, no point",
        "cell_not_attempted": "not attempted", "identical": "identical files",
        "needs_help": "Needs help", "lowest_first": "lowest total first",
        "not_started": "not started", "all_started": "every exercise started",
        "no_one_needs_help": "Every student has full marks.", "failed_by": "Failed by", "colon": ": ",
        "list_separator": ", ",
        # the grade after grading: raw, penalty, final; lateness; overrides; similar code
        "raw": "raw", "penalty": "penalty", "on_time": "on time", "late": "late", "too_late": "after the cutoff",
        "not_reviewed": "answers awaiting review",
        "unknown": "time unknown", "days_late": "d late", "hours_late": "h late",
        "overrides": "Overrides", "overridden": "overridden", "whole_grade": "the whole grade",
        "graded_points": "graded", "instructor_points": "now", "comment": "Comment", "by": "By", "at": "When",
        "target": "What", "not_applied": "not applied", "no_overrides": "No grade was overridden.",
        "similar_code": "Similar code", "similar": "similar code",
        "similar_note": "Pairs whose code for one exercise is near-identical once names and layout are set aside "
                        "(the stub's code never counts); shared code is marked. It changes no grade.",
        "no_similar": "No two submissions are alike.", "share": "of it is shared",
        "similarity_failed": "Similar code was not compared",
        # what the class's own checks (audits) caught of the broken implementations the grader hands them
        "catches": "Broken implementations the class's checks caught",
        "catches_note": "Each line sums, over the students graded, the broken implementations their check rejected "
                        "with an AssertionError.",
        "caught": "Caught", "caught_all": "Caught every one", "missed_most": "Missed most often",
    },
    "zh": {
        "class_report": "班级报告", "submissions": "提交数", "counted": "计入统计",
        "mean": "平均", "median": "中位数", "students": "学生", "submission": "提交", "total": "总分",
        "status": "状态", "report": "报告", "no_report": "无报告", "no_submissions": "尚无提交。",
        "distribution": "总分分布", "histogram": "各总分区间的提交数",
        "left_out": "未计入分布、平均分和中位数（无法对学生的作业作出评判）",
        "left_out_none": "所有提交均已计入。",
        "exercises": "各练习", "exercise": "练习", "mean_points": "平均得分", "full_marks": "满分人数",
        "not_attempted": "未作答人数", "most_failed": "未通过人数最多的评分项", "criterion": "评分项",
        "failed": "未通过", "common_message": "最常见的反馈", "no_failures": "没有未通过的评分项。",
        "all_criteria": "每个评分项的通过率", "passed": "通过",
        "complete": "满分", "partial": "部分得分", "empty": "空提交", "unreadable": "无法读取",
        "grader_error": "评分器故障", "killed_workers": "评分进程被终止", "missing": "缺交",
        "student": "学生", "not in roster": "不在名单中", "ambiguous": "匹配到多名学生",
        "cell_passed": "满分", "cell_partial": "部分得分", "cell_failed": "已作答，未得分",
        "cell_not_attempted": "未作答", "identical": "文件完全相同",
        "needs_help": "需要帮助", "lowest_first": "总分低者在前",
        "not_started": "未开始", "all_started": "每个练习都已开始",
        "no_one_needs_help": "所有学生均为满分。", "failed_by": "未通过的学生", "colon": "：",
        "list_separator": "、",
        "not_reviewed": "待批阅的书面回答",
        "raw": "扣分前", "penalty": "迟交扣分", "on_time": "按时", "late": "迟交", "too_late": "截止后提交",
        "unknown": "提交时间不明", "days_late": "天迟交", "hours_late": "小时迟交",
        "overrides": "成绩修改", "overridden": "经教师修改", "whole_grade": "总成绩",
        "graded_points": "评分所得", "instructor_points": "现为", "comment": "说明", "by": "修改人", "at": "时间",
        "target": "对象", "not_applied": "未生效", "no_overrides": "没有修改过的成绩。",
        "similar_code": "相似代码", "similar": "代码相似",
        "similar_note": "同一练习中，忽略命名与排版后几乎相同的代码对（模板中的代码不计）；共有的代码已标出。"
                        "这不影响成绩。",
        "no_similar": "没有相似的提交。", "share": "为共有代码",
        "similarity_failed": "未比较相似代码",
        "catches": "全班的检查拒绝的有缺陷实现",
        "catches_note": "每一行汇总所有已评分学生的检查以 AssertionError 拒绝的有缺陷实现。",
        "caught": "拒绝", "caught_all": "全部拒绝的学生", "missed_most": "最常漏掉的",
    },
}
