"""Short everyday sentences the int8 check holds against fp32 beside the repository's documents: a
few tokens each, the length of a chat line or a typed query, where one quantized token weighs most
("You got it right." was under the bound while every document sentence passed)."""

SHORT_TEXTS = (
    "You got it right.", "That's fine.", "See you tomorrow.", "I'm on my way.", "Thanks a lot!",
    "No worries.", "Can you help me?", "What time is it?", "Where are you?", "I don't know.",
    "Sounds good to me.", "Let me check.", "It's raining again.", "I'm hungry.", "Call me later.",
    "Good morning!", "Good night.", "How are you doing?", "I'm fine, thanks.", "Not bad at all.",
    "That makes sense.", "I agree with you.", "I'm not sure.", "Maybe next time.", "Let's go.",
    "Hold on a second.", "Are you serious?", "That was close.", "Well done!", "I'm sorry.",
    "Never mind.", "It doesn't matter.", "Take care.", "Happy birthday!", "See you soon.",
    "I lost my keys.", "The door is open.", "Turn off the lights.", "Close the window, please.",
    "Is it ready yet?", "We're almost there.", "Where is the station?", "How much is it?",
    "I need a coffee.", "The bus is late.", "My phone died.", "It's too cold here.", "Nice to meet you.",
    "What do you mean?", "I forgot.", "Try again.", "It works now.", "That's not right.", "Why not?",
    "Sure thing.", "Of course.", "Me too.", "Just a moment.", "Don't worry about it.", "Good luck!",
    "I'll be there.", "You're welcome.", "Excuse me.", "Can I come in?", "Please sit down.",
    "It's my turn.", "Who is it?", "Wait for me.", "I'm tired.", "Let's eat.", "Same here.",
    "You did great.", "Keep going.", "That's funny.", "I miss you.", "I can't hear you.",
    "Speak up, please.", "What happened?", "It's broken.", "Send it to me.", "Is anyone home?",
    "Dinner is ready.", "The kids are asleep.", "I'm at work.", "Text me back.", "Got it.",
    "Yes, please.", "No, thank you.", "Okay.", "Hi!", "Bye.", "Cheers!", "Oops.", "Really?",
    "Exactly.", "Right away.", "Fair enough.", "You're right.", "I was wrong.", "Let it go.",
    "Come here.", "Look at this.", "Hurry up!", "Slow down.", "It's late.", "Lunch is on me.",
)
