"""Interface words of the review pages, in both languages (sentences go through `grader.i18n.t` instead), kept like
grader/render/labels.py: tests/test_review_app.py keeps the two languages' keys the same. A template reads them as
`L.<key>`, so no key may be the name of a dict method (`keys`, `items`): Jinja would print the method."""

REVIEW_LABELS = {
    "en": {
        "title": "Written answers", "question": "Question", "exercise": "Exercise",
        "graded": "graded", "progress": "Graded", "grade": "grade", "rubric": "Rubric",
        "edit_rubric": "edit the rubric",
        "student": "Student", "answer": "Answer", "empty_answer": "(no answer)", "autograde": "Autograded result",
        "score": "Score", "status": "Status", "failing": "Criteria not passed",
        "none_failing": "every criterion passed",
        "no_autograde": "no autograded result", "adjustment": "Point adjustment", "comment": "Comment",
        "points": "Points", "save": "Save", "next": "Next", "prev": "Previous", "all": "all",
        "ungraded": "ungraded", "filter": "Show", "with_item": "with item", "shortcuts": "Keys",
        "keys_help": "1–9 toggle an item · s save · n next · p previous", "keep_theirs": "Keep theirs",
        "overwrite": "Overwrite with mine", "apply_group": "give them all this grade",
        "text_en": "Text (English)", "text_zh": "Text (Chinese)", "change": "Change",
        "add_item": "Add an item", "add": "Add", "back": "All questions", "nothing_here": "No answer to show here.",
        "reviewer": "Reviewer", "not_saved": "not saved yet",
        "language": "中文", "max_points": "worth", "colon": ": ",
        "changed_since": "The student's answer changed after this grade was saved: check it again.",
    },
    "zh": {
        "title": "书面回答", "question": "题目", "exercise": "练习",
        "graded": "已批阅", "progress": "已批阅", "grade": "批阅", "rubric": "评分细则", "edit_rubric": "修改评分细则",
        "student": "学生", "answer": "回答", "empty_answer": "（未作答）", "autograde": "自动评分结果",
        "score": "得分", "status": "状态", "failing": "未通过的评分项", "none_failing": "所有评分项均已通过",
        "no_autograde": "无自动评分结果", "adjustment": "加减分", "comment": "评语",
        "points": "得分", "save": "保存", "next": "下一份", "prev": "上一份", "all": "全部",
        "ungraded": "未批阅", "filter": "显示", "with_item": "含此项", "shortcuts": "快捷键",
        "keys_help": "1–9 选择或取消评分项 · s 保存 · n 下一份 · p 上一份", "keep_theirs": "保留对方的批阅",
        "overwrite": "用我的批阅覆盖", "apply_group": "给所有相同回答同样的批阅",
        "text_en": "说明（英文）", "text_zh": "说明（中文）", "change": "修改",
        "add_item": "新增评分项", "add": "新增", "back": "全部题目", "nothing_here": "这里没有可显示的回答。",
        "reviewer": "批阅人", "not_saved": "尚未保存",
        "language": "English", "max_points": "满分", "colon": "：",
        "changed_since": "保存这份批阅之后，学生的回答有了改动：请再检查一遍。",
    },
}
