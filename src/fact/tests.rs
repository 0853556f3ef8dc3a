use super::*;

fn facts(text: &str) -> Vec<String> {
    user_facts(text)
}

#[test]
fn greetings_thanks_questions_and_chatter_say_nothing_in_three_languages() {
    for text in [
        "hi! how's it going?",
        "lol fair enough. thanks!",
        "Thanks so much, that's really helpful!",
        "Thanks for the help earlier!",
        "Can you explain the difference between a mutex and a semaphore?",
        "早上好呀！",
        "你觉得明天会下雨吗？",
        "哈哈，好的，谢谢！",
        "谢谢你的建议！",
        "こんにちは！",
        "なるほど、ありがとうございます！",
        "Pythonのリスト内包表記ってどう書くんですか？",
        // Acknowledgements of what the assistant said.
        "I see.",
        "I agree!",
        "Me too!",
        "I didn't know that!",
        "I'll try, thanks.",
        "我知道了。",
        "我同意。",
        "我也是！",
        "おやすみなさい！",
        "そうなんだ。",
        "確かに。",
        "それは知らなかった。",
        "頑張ります！",
        "楽しかったです！",
        "私もです。",
        "ちょっと待ってください。",
        // A hedge alone, or over an opinion of what was just said.
        "I think so.",
        "I think you're right.",
        "I guess that's a good idea!",
        "I think that's great.",
    ] {
        assert_eq!(facts(text), Vec::<String>::new(), "{text}");
    }
    // The same words with a fact of the speaker's are a fact.
    for (text, fact) in [
        ("I know Python and Go.", "I know Python and Go"),
        ("我也是医生。", "我也是医生"),
        ("私も東京に住んでいます。", "私も東京に住んでいます"),
        ("I agree with my manager Kenji about remote work.", "I agree with my manager Kenji about remote work"),
        ("I think my sister lives in Lyon.", "I think my sister lives in Lyon"),
        ("You're right, I live in Bath now.", "I live in Bath now"),
        ("I believe my passport expires in March.", "I believe my passport expires in March"),
    ] {
        assert_eq!(facts(text), [fact], "{text}");
    }
}

#[test]
fn several_facts_in_one_message_are_split() {
    assert_eq!(
        facts("Hey there! I'm Marco, I'm a landscape architect, and I live in Turin."),
        ["I'm Marco", "I'm a landscape architect", "I live in Turin"]
    );
    assert_eq!(facts("Hi! My name is Priya, nice to meet you."), ["My name is Priya"]);
    assert_eq!(facts("你好！我叫李静，是个前端工程师，现在住在杭州。"), ["我叫李静", "是个前端工程师", "现在住在杭州"]);
    assert_eq!(
        facts("はじめまして、佐藤です。看護師をしていて、福岡に住んでいます。"),
        ["佐藤です", "看護師をしていて", "福岡に住んでいます"]
    );
    assert_eq!(facts("我每周去三次健身房，另外我还在学吉他。"), ["我每周去三次健身房", "我还在学吉他"]);
    assert_eq!(
        facts("Honestly I don't play piano anymore, haven't touched it in years."),
        ["I don't play piano anymore, haven't touched it in years"]
    );
}

#[test]
fn an_ask_to_remember_keeps_the_fact_without_the_ask_in_three_languages() {
    for (text, fact) in [
        ("Please remember that my flight is at 9am on Friday.", "my flight is at 9am on Friday"),
        ("Remember that my wife's name is Ana", "my wife's name is Ana"),
        ("Please remember: I'm allergic to shellfish", "I'm allergic to shellfish"),
        ("Don't forget that I'm vegetarian!", "I'm vegetarian"),
        ("Keep in mind that I work night shifts", "I work night shifts"),
        ("Note that my manager is Kenji", "my manager is Kenji"),
        ("Can you remember that my locker code is 4412?", "my locker code is 4412"),
        ("For future reference, my dentist is Lee Park", "my dentist is Lee Park"),
        ("Please remember that\u{0}my pin is 1234", "my pin is 1234"),
        ("I'm allergic to penicillin, so please keep that in mind.", "I'm allergic to penicillin"),
        ("My gate code is 2231, remember that!", "My gate code is 2231"),
        ("请记住我的航班是早上9点", "我的航班是早上9点"),
        ("帮我记一下：我女儿对花生过敏", "我女儿对花生过敏"),
        ("别忘了我下周三去上海出差", "我下周三去上海出差"),
        ("私の誕生日は5月3日だと覚えておいてください", "私の誕生日は5月3日"),
        ("妹がリマに住んでいることを忘れないでね", "妹がリマに住んでいる"),
        ("覚えておいて、妹はリマに住んでいます", "妹はリマに住んでいます"),
    ] {
        assert_eq!(facts(text), [fact], "{text}");
    }
    // The ask alone, or with thanks, is no fact.
    for text in
        ["Please remember this.", "Don't forget!", "Thanks, note that.", "记住了吗？记住。", "覚えておいてね！", "メモしておいてください。"]
    {
        assert_eq!(facts(text), Vec::<String>::new(), "{text}");
    }
    // "Remember," alone still marks a restatement; "remember that" asks
    // to store what follows, and "I remember that…" is the speaker's own.
    assert!(Clause::read("Remember, I don't eat meat").cues.restatement);
    assert!(!Clause::read("Remember that I don't eat meat").cues.restatement);
    assert_eq!(facts("I remember that we met in Porto"), ["I remember that we met in Porto"]);
}

#[test]
fn a_fact_with_the_speaker_unsaid_is_kept_and_a_remark_is_not() {
    for text in ["不吃辣。", "在学吉他。", "最近在学日语。", "刚换了新工作。", "今年在准备考研。", "每天跑五公里。", "没养过宠物。"]
    {
        assert_eq!(facts(text), [text.trim_end_matches('。')], "{text}");
    }
    for text in
        ["不错！", "没关系。", "不知道。", "太好了！", "有道理。", "天气真好。", "不客气～", "没想到。", "不会吧！", "不知道也没事。"]
    {
        assert_eq!(facts(text), Vec::<String>::new(), "{text}");
    }
    // And Japanese thanks for help are no fact.
    assert_eq!(facts("ありがとう、助かりました！"), Vec::<String>::new());
    // English diary style: an activity with its object is the speaker's.
    for text in ["Learning Rust these days.", "Loving the new keyboard!", "Training for a marathon.", "Saving for a house."] {
        assert_eq!(facts(text), [text.trim_end_matches(['.', '!'])], "{text}");
    }
    for text in [
        "Loving it!",
        "Reading this now.",
        "Working on it.",
        "Getting there.",
        "Sounds good.",
        "Wild finish.",
        "Starting now!",
        "Taking a break.",
    ] {
        assert_eq!(facts(text), Vec::<String>::new(), "{text}");
    }
}

#[test]
fn corrections_keep_only_the_corrected_value() {
    assert_eq!(facts("My sister lives in Leeds — sorry, I meant Bath."), ["My sister lives in Bath"]);
    assert_eq!(facts("Sorry, I meant GitLab, not GitHub."), ["Sorry, I meant GitLab, not GitHub"]);
    assert_eq!(facts("其实她已经六岁了，我刚才说错了。"), ["其实她已经六岁了"]);
    assert_eq!(facts("実は、誕生日は3月15日でした。すみません。"), ["実は、誕生日は3月15日でした"]);
}

#[test]
fn third_person_rewrites_keep_grammar() {
    for (said, fact) in [
        ("I live in Portland", "Lives in Portland"),
        ("I switched from Vim to Helix last month", "Switched from Vim to Helix last month"),
        ("I'm Marco", "Name is Marco"),
        ("I'm vegetarian", "Is vegetarian"),
        ("I've got two cats at home", "Has got two cats at home"),
        ("I don't eat pork", "Does not eat pork"),
        ("I usually work late at night", "Usually works late at night"),
        ("I got a new job as a junior web developer", "Got a new job as a junior web developer"),
        ("I study Rust on weekends", "Studies Rust on weekends"),
        ("My name is Priya", "Name is Priya"),
        // The speaker's possessives become the user's.
        ("I keep my road bike in the garage", "Keeps their road bike in the garage"),
        ("My sister lives with my parents", "Sister lives with their parents"),
        ("I taught myself Rust, and the old laptop is mine", "Taught themselves Rust, and the old laptop is theirs"),
        ("I do most of my coding in Helix.", "Does most of their coding in Helix."),
        // So do the speaker's pronouns inside: "they" takes I's verb
        // forms but for "am" and "was"; a Roman numeral stays.
        ("I think I'm going to switch to Neovim", "Thinks they're going to switch to Neovim"),
        ("i think i'll try Zig", "Thinks they'll try Zig"),
        ("I guess I prefer tea over coffee", "Guesses they prefer tea over coffee"),
        ("I think I’m allergic to cats", "Thinks they're allergic to cats"),
        ("I think I am moving to Oslo", "Thinks they are moving to Oslo"),
        ("I told them I was tired", "Told them they were tired"),
        ("I keep the notes I write in Obsidian", "Keeps the notes they write in Obsidian"),
        ("My sister taught me Rust", "Sister taught them Rust"),
        ("I read about World War I last week", "Read about World War I last week"),
        ("Call me Sam", "Call me Sam"),
        // Other words holding the letters stay: "Myanmar", "mystery".
        ("I love a mystery set in Myanmar", "Loves a mystery set in Myanmar"),
        ("我叫李静", "叫李静"),
        ("私は佐藤です", "佐藤"),
        // And in Chinese and Japanese, once the subject is dropped.
        ("我想和我的朋友Sofia一起学salsa", "想和自己的朋友Sofia一起学salsa"),
        ("我和我的妻子住在上海，我们的猫叫咪咪", "和自己的妻子住在上海，我们的猫叫咪咪"),
        ("私は私の友達と京都に住んでいます", "自分の友達と京都に住んでいます"),
        ("僕は毎朝僕の犬と走ります", "毎朝自分の犬と走ります"),
        // A sentence whose subject is someone else keeps its words.
        ("周末我和我的朋友去爬山", "周末我和我的朋友去爬山"),
    ] {
        assert_eq!(third_person(said), fact, "{said}");
    }
}

fn slot(text: &str) -> Option<Slot> {
    Clause::read(text).slot
}

#[test]
fn slots_in_three_languages() {
    let cases: &[(&str, &str, Option<&str>, &str)] = &[
        ("I live in Portland", "home", None, "portland"),
        ("we just moved to Denver", "home", None, "denver"),
        ("Yep, Seattle is home", "home", None, "seattle"),
        ("I work as a barista at a small cafe downtown", "job", None, "barista at a small cafe downtown"),
        ("I got a new job as a junior web developer", "job", None, "junior web developer"),
        ("I'm vegetarian", "diet", None, "vegetarian"),
        ("Like I mentioned, I don't eat meat", "diet", None, "vegetarian"),
        ("I do most of my editing in Vim", "use", Some("editor"), "vim"),
        ("I prefer concise Python examples", "use", Some("example"), "concise python examples"),
        ("For CLIs I prefer Go, though", "use", Some("cli"), "go"),
        ("I'm allergic to peanuts too", "allergy", None, "peanuts"),
        ("My daughter is 7", "age", None, "7"),
        ("Actually, she turned 8 last week", "age", None, "8"),
        ("I've got two cats at home", "pet", Some("cat"), "2"),
        ("We adopted a third cat over the weekend", "pet", Some("cat"), "third"),
        ("我现在有两个女儿了", "family", Some("女儿"), "2"),
        ("甘いものは苦手なんです", "dislike", None, "甘いもの"),
        ("I sold my car, so now I commute by bike", "commute", None, "bike"),
        ("我现在用的手机是iPhone 12", "use", Some("phone"), "iphone 12"),
        ("我最喜欢的运动是羽毛球", "favourite", Some("sport"), "羽毛球"),
        ("我在深圳工作", "workplace", None, "深圳"),
        ("我是在深圳上班的", "workplace", None, "深圳"),
        ("我女儿今年五岁", "age", None, "5"),
        ("其实她已经六岁了", "age", None, "6"),
        ("我对花粉过敏", "allergy", None, "花粉"),
        ("横浜に住んでいます", "home", None, "横浜"),
        ("住まいは横浜です", "home", None, "横浜"),
        ("エディタはVimを使っています", "use", Some("editor"), "vim"),
        ("一番好きな食べ物はラーメンです", "favourite", Some("food"), "ラーメン"),
        ("誕生日は3月5日です", "birthday", None, "3月5日"),
        ("看護師をしていて", "job", None, "看護師"),
        ("猫アレルギーがあります", "allergy", None, "猫"),
        ("I'm learning the cello", "learning", None, "cello"),
        ("My cat's name is Mochi", "name", None, "mochi"),
    ];
    for (text, attribute, qualifier, value) in cases {
        let slot = slot(text).unwrap_or_else(|| panic!("no slot in {text}"));
        assert_eq!((slot.attribute.as_str(), slot.qualifier.as_deref(), slot.value.as_str()), (*attribute, *qualifier, *value), "{text}");
    }
    for text in ["I play the piano", "我在准备考研", "週に二回ジムに通っています"] {
        assert_eq!(slot(text), None, "{text}");
    }
}

#[test]
fn cues_in_three_languages() {
    assert!(Clause::read("I don't drink coffee anymore").cues.cessation);
    assert!(Clause::read("我已经不再喝奶茶了").cues.cessation);
    assert!(Clause::read("健身房我已经不去了").cues.cessation);
    assert!(Clause::read("もうコーヒーは飲んでいません").cues.cessation);
    assert!(Clause::read("ジムはもう退会しました").cues.cessation);
    assert!(!Clause::read("I don't eat pork").cues.cessation);
    assert!(!Clause::read("我不吃猪肉").cues.cessation);
    let switch = Clause::read("I've switched from Vim to Helix").switch.unwrap();
    assert_eq!((switch.from.as_deref(), switch.to.as_str()), (Some("Vim"), "Helix"));
    assert_eq!(Clause::read("我上周换成Pixel 8了").switch.unwrap().to, "Pixel 8");
    assert!(Clause::read("最近VS Codeに乗り換えました").switch.unwrap().to.contains("VS Code"));
    let meant = Clause::read("I meant GitLab, not GitHub");
    assert!(meant.cues.correction);
    assert_eq!(meant.substitution, Some(("GitHub".to_owned(), "GitLab".to_owned())));
    assert!(Clause::read("Oh, and I'm allergic to peanuts too").cues.additive);
    assert!(Clause::read("另外，我对青霉素也过敏").cues.additive);
    assert!(Clause::read("Like I mentioned, I don't eat meat").cues.restatement);
}

#[test]
fn stored_canonical_memories_are_read_back() {
    let read = |t: &str| Clause::read_memory(t).slot.map(|s| (s.attribute, s.value));
    assert_eq!(read("Lives in Portland"), Some(("home".to_owned(), "portland".to_owned())));
    assert_eq!(read("Works as a barista at a small cafe downtown").map(|s| s.0), Some("job".to_owned()));
    assert_eq!(read("Daughter is 7"), Some(("age".to_owned(), "7".to_owned())));
    assert_eq!(read("Has got two cats at home").map(|s| s.0), Some("pet".to_owned()));
    assert_eq!(read("Is vegetarian"), Some(("diet".to_owned(), "vegetarian".to_owned())));
    // 自己的 / 自分の stored for the speaker's 我的 / 私の are theirs again.
    let said = Clause::read("我在我的公司工作").slot.map(|s| (s.attribute, s.value));
    assert!(said.is_some(), "the speaker's words have a slot");
    assert_eq!(third_person("我在我的公司工作"), "在自己的公司工作");
    assert_eq!(read("在自己的公司工作"), said);
    // A possessive stored as "their" is the speaker's "my" again.
    let said = Clause::read("I do most of my coding in Helix").slot.map(|s| (s.attribute, s.value));
    assert!(said.is_some(), "the speaker's words have a slot");
    assert_eq!(read(&third_person("I do most of my coding in Helix")), said);
}

#[test]
fn hostile_text_never_panics() {
    let long = "I live in Portland and ".repeat(500);
    for text in [
        "",
        "   ",
        "...!!!???",
        "İİİ and I live in Oslo, so now I commute by bike",
        "I live in Leeds — sorry, I meant K\u{212A}\u{212A}",
        "\u{212A}, though",
        "SHE\u{0130} turned 8, too",
        "She turned 8 \u{212A}",
        "我妹妹住在天津，不对，",
        "不对，是",
        "、、、、",
        "実は、",
        "Sorry, I meant",
        "I meant , not ",
        "🙂🙂 I love 🍣, and I'm allergic to 🥜 too 🙂",
        long.as_str(),
    ] {
        for fact in user_facts(text) {
            let _ = Clause::read(&fact);
            let _ = third_person(&fact);
        }
        let _ = Clause::read(text);
        let _ = Clause::read_memory(text);
    }
}
