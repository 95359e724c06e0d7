"""Published prompt texts, byte for byte (upstream spec §1.4). Data, not code: never reformat.

Direct templates use ``{query}`` where the reference writes ``{self.query_text}``.
"""

# ruff: noqa: E501

DL_QUESTION_GENERATION = "Break the query '{query_text}' into concise questions that must be answered. \n     Generate 10 concise insightful questions that reveal whether information relevant for '{query_text}' was provided, showcasing a deep understanding of the subject matter. Avoid basic or introductory-level inquiries. Keep the questions short."

DL_NUGGET_GENERATION = "Break the query '{query_text}' into concise nuggets that must be mentioned. \n     Generate 10 concise insightful nuggets that reveal whether information relevant for '{query_text}' was provided, showcasing a deep understanding of the subject matter. Avoid basic or introductory-level nuggets. Keep nuggets to a maximum of 4 words."

CAR_QUESTION_GENERATION = "Explore the connection between '{query_title}' with a specific focus on the subtopic '{query_subtopic}'.\n        Generate insightful questions that delve into advanced aspects of '{query_subtopic}', showcasing a deep understanding of the subject matter. Avoid basic or introductory-level inquiries. "

CAR_NUGGET_GENERATION = "Explore the connection between '{query_title}' with a specific focus on the subtopic '{query_subtopic}'.\n        Generate insightful nuggets (key facts) that delve into advanced aspects of '{query_subtopic}', showcasing a deep understanding of the subject matter. Avoid basic or introductory-level nuggets. Keep nuggets to a maximum of 4 words."

QUESTION_JSON_INSTRUCTION = '\nGive the question set in the following JSON format:\n```json\n{ "questions": [question_text_1, question_text_2, ... ] }\n```'

NUGGET_JSON_INSTRUCTION = '\nGive the nugget set in the following JSON format:\n```json\n{ "nuggets": [nugget_text_1, nugget_text2, ... ] }\n```'

PAPER_DL_QUESTION_GENERATION = "Break the query '{query_title}' into concise questions that must be answered. Generate 10 concise insightful questions that reveal whether information relevant for '{query_title}' was provided, showcasing a deep understanding of the subject matter. Avoid basic or introductory-level inquiries. Keep the questions short and in a Python list format.\n"

PAPER_CAR_QUESTION_GENERATION = "Explore the connection between '{query_title}' with a specific focus on the subtopic '{query_subtopic}'. Generate insightful questions that delve into advanced aspects of '{query_subtopic}', showcasing a deep understanding of the subject matter. Avoid basic or introductory-level inquiries. Give the question set in a Python list format.\n"

SELF_RATED_PRETEXT = "Can the question be answered based on the available context? choose one:\n        - 5: The answer is highly relevant, complete, and accurate.\n        - 4: The answer is mostly relevant and complete but may have minor gaps or inaccuracies.\n        - 3: The answer is partially relevant and complete, with noticeable gaps or inaccuracies.\n        - 2: The answer has limited relevance and completeness, with significant gaps or inaccuracies.\n        - 1: The answer is minimally relevant or complete, with substantial shortcomings.\n        - 0: The answer is not relevant or complete at all.\n        "

SELF_RATED_CHAT_SYSTEM = "Can the question be answered based on the available context? choose one grade:\n        - 5: The answer is highly relevant, complete, and accurate.\n        - 4: The answer is mostly relevant and complete but may have minor gaps or inaccuracies.\n        - 3: The answer is partially relevant and complete, with noticeable gaps or inaccuracies.\n        - 2: The answer has limited relevance and completeness, with significant gaps or inaccuracies.\n        - 1: The answer is minimally relevant or complete, with substantial shortcomings.\n        - 0: The answer is not relevant or complete at all.\n\n        You must only respond with the numerical grade, no further explanation.\n        "

BRIEF_ANSWER_KEY_SYSTEM = "If the question can be answered based on the available context, then please summarize the answer from the context. Otherwise respond with 'unanswerable'.\n\n        You must only respond with the short answer or 'unanswerable', no further explanation.\n        "

T5_ANSWER_VERIFICATION = 'For the question "{question}" the correct answer is "{correct_answer}". Is "{answer}" an equally correct response to this question? Answer yes or no.'

NUGGET_SELF_RATED_PRETEXT = "Given the context, evaluate the coverage of the specified key fact (nugget). Use this scale:\n        - 5: Detailed, clear coverage.\n        - 4: Sufficient coverage, minor omissions.\n        - 3: Mentioned, some inaccuracies or lacks detail.\n        - 2: Briefly mentioned, significant omissions or inaccuracies.\n        - 1: Minimally mentioned, largely inaccurate.\n        - 0: Not mentioned at all.\n        "

FAGB = "Instruction: Indicate if the passage is relevant for the question. Respond with 'Yes' or 'No'.\n\nQuestion: {query}\nPassage: {context}\nAnswer:\n"

FAGB_FEW = "Instruction: Indicate if the passage is relevant for the question. Respond with 'Yes' or 'No'.\n\nPassage: Its 25 drops per ml, you guys are all wrong. If it is water, the standard was changed 15 - 20 years ago to make 20 drops = 1mL. The viscosity of most things is temperature dependent, so this would be at room temperature. Hope this helps.\nQuestion: how many eye drops per ml \nAnswer: Yes \n\nPassage: RE: How many eyedrops are there in a 10 ml bottle of Cosopt? My Kaiser pharmacy insists that 2 bottles should last me 100 days but I run out way before that time when I am using 4 \ndrops per day.In the past other pharmacies have given me 3 10-ml bottles for 100 days.E: How many eyedrops are there in a 10 ml bottle of Cosopt? My Kaiser pharmacy insists that 2 bottles \nshould last me 100 days but I run out way before that time when I am using 4 drops per day. \nQuestion: how many eye drops per ml \nAnswer: No \n\nPassage: : You can transfer money to your checking account from other Wells Fargo. accounts through Wells Fargo Mobile Banking with the mobile app, online, at any. Wells Fargo ATM, or at a \nWells Fargo branch. 1 Money in — deposits. \nQuestion: can you open a wells fargo account online \nAnswer: No \n\nPassage: You can open a Wells Fargo banking account from your home or even online. It is really easy to do, provided you have all of the appropriate documentation. Wells Fargo has so many b\nank account options that you will be sure to find one that works for you. They offer free checking accounts with free online banking. \nQuestion: can you open a wells fargo account online \nAnswer: Yes\n\nPassage: {context}\nQuestion: {query}\nAnswer:\n"

HELM = "Instruction: Does the passage answer the query? Respond with 'Yes' or 'No'.\n\nQuery: {query}\nPassage: {context}\nAnswer:\n"

SUN = 'Instruction: Given a passage and a query, predict whether the passage includes an answer to the query by producing either "Yes" or "No".\nQuery: {query}\nPassage: {context}\nAnswer:\n'

SUN_FEW = 'Instruction: Given a passage and a query, predict whether the passage includes an answer to the query by producing either "Yes" or "No".\n\nPassage: Its 25 drops per ml, you guys are all wrong. If it is water, the standard was changed 15 - 20 years ago to make 20 drops = 1mL. The viscosity of most things is temperature dependent, so this would be at room temperature. Hope this helps.\nQuery: how many eye drops per ml\nDoes the passage answer the query?\nAnswer: Yes\n\nPassage: RE: How many eyedrops are there in a 10 ml bottle of Cosopt? My Kaiser pharmacy insists that 2 bottles should last me 100 days but I run out way before that time when I am using 4 drops per day.In the past other pharmacies have given me 3 10-ml bottles for 100 days.E: How many eyedrops are there in a 10 ml bottle of Cosopt? My Kaiser pharmacy insists that 2 bottles should last me 100 days but I run out way before that time when I am using 4 drops per day.\nQuery: how many eye drops per ml\nDoes the passage answer the query?\nAnswer: No\n\nPassage: : You can transfer money to your checking account from other Wells Fargo. accounts through Wells Fargo Mobile Banking with the mobile app, online, at any. Wells Fargo ATM, or at a Wells Fargo branch. 1 Money in — deposits.\nQuery: can you open a wells fargo account online\nDoes the passage answer the query?\nAnswer: No\n\nPassage: You can open a Wells Fargo banking account from your home or even online. It is really easy to do, provided you have all of the appropriate documentation. Wells Fargo has so many bank account options that you will be sure to find one that works for you. They offer free checking accounts with free online banking. \nQuery: can you open a wells fargo account online\nDoes the passage answer the query?\nAnswer: Yes\n\nPassage: {context}\nQuery: {query}\n\nDoes the passage answer the query?\nAnswer:\n'

THOMAS = "Instruction: You are a search quality rater evaluating the relevance of passages. Given a query and a passage, you must provide a score on an integer scale of 0 to 2 with the following meanings:\n2 = highly relevant, very helpful for this query\n1 = relevant, may be partly helpful but might contain other irrelevant content\n0 = not relevant, should never be shown for this query\n\nQuery: {query}\nPassage: {context}\nAnswer:\n"

# JSON response instructions (spec §1.4.5), appended only when a backend runs in JSON mode.
SHORT_ANSWER_JSON = '\nGive the response in the following JSON format:\n```json\n{ "short_answer": str }\n```'
GRADE_JSON_STRICT = '\nRespond only in the following JSON format:\n```json\n{ "grade": int }\n```\n'
SHORT_ANSWER_JSON_STRICT = '\nRespond only in the following JSON format:\n```json\n{ "short_answer": str }\n```\n'
GRADE_JSON = '\nGive the response in the following JSON format:\n```json\n{ "grade": int }\n```'
EXTRACT_JSON = '\nGive the response in the following JSON format:\n```json\n{ "extract": int }\n```'
RELEVANCE_BOOL_JSON = '\nGive the response in the following JSON format:\n```json\n{ "relevance": bool }\n```'
RELEVANCE_INT_JSON = '\nGive the response in the following JSON format:\n```json\n{ "relevance": int }\n```'
