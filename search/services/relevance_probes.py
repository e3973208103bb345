"""Off-topic probes: everyday sentences in many domains and a few languages, written for this
project. What an unrelated query scores against a collection is measured by sending these
(docs/relevance.md); a collection that happens to be about some of them shifts only the upper
quantiles, which the fit does not use."""

import io

import numpy as np
from PIL import Image

TEXTS = (
    'Preheat the oven and grease a round baking tin before you mix the batter.',
    'How long should pasta boil before it is al dente?',
    'The tomatoes in my garden have yellow leaves and brown spots.',
    'When is the best time to prune an apple tree?',
    'My cat keeps scratching the sofa instead of the scratching post.',
    'How often should a puppy be fed in its first months?',
    'The football match went to extra time and ended in a penalty shootout.',
    'Who won the tennis final last summer?',
    'Tips for running a first marathon without injury.',
    'The hotel room had a view over the harbour and the old lighthouse.',
    'Which documents do I need to rent a car abroad?',
    'The train to the coast was delayed by forty minutes this morning.',
    'What is the weather forecast for the weekend in the mountains?',
    'A thunderstorm knocked down the old oak tree in the park.',
    'She plays the cello in a string quartet on Sunday evenings.',
    'Recommend a novel with a surprising ending.',
    'The museum opened a new exhibition of medieval tapestries.',
    'How do I remove a red wine stain from a white carpet?',
    'Our neighbours are painting their fence a bright shade of blue.',
    'What is a good stretching routine for lower back pain?',
    'Drinking enough water helps on a hot day.',
    'How many calories are in a bowl of porridge with honey?',
    'The children built a sandcastle with towers and a moat.',
    'Where can I buy fresh fish near the market square?',
    'The bakery on the corner sells sourdough and cinnamon rolls.',
    'My bicycle chain keeps slipping when I change gears.',
    'How do I change a flat tyre on a mountain bike?',
    'The price of apartments in the city centre rose again this year.',
    'Ideas for a birthday party for a seven-year-old.',
    'What should I pack for a week of camping by a lake?',
    'The river flooded the meadow after days of heavy rain.',
    'How do bees make honey from the nectar of flowers?',
    'The choir sang old folk songs at the village festival.',
    'A recipe for vegetable soup with lentils and carrots.',
    'Why do leaves change colour in autumn?',
    'How far is the moon from the earth?',
    'The wedding reception was held in a barn decorated with lanterns.',
    'My grandmother knits warm scarves for the whole family every winter.',
    'Which wine goes well with grilled salmon?',
    'The swimming pool is closed for repairs until next month.',
    'How do I teach my dog to walk on a loose lead?',
    'The farmer harvested the wheat before the rain came.',
    'A documentary about whales migrating along the coast.',
    'Learning to play the piano as an adult.',
    'How long does it take to fly from Paris to Tokyo?',
    'The kids want pancakes with maple syrup for breakfast.',
    'Our team lost the basketball game by two points.',
    'The painter used bright yellow and deep blue in the sunflower picture.',
    'How do I get rid of snails in the vegetable patch?',
    'The old castle on the hill is open to visitors in summer.',
    'Comment faire une bonne pâte à crêpes ?',
    'Wie lange muss ein Ei kochen, damit es weich bleibt?',
    '¿Cuál es la mejor época para visitar las playas del sur?',
    'Il concerto di stasera inizia alle nove in piazza.',
    'Hoe plant ik tulpenbollen in de herfst?',
    'Jak nauczyć się pływać w wieku dorosłym?',
    'Как приготовить борщ со свёклой и капустой?',
    '週末に山でハイキングをするのが好きです。',
    '我喜欢在公园里散步和喂鸽子。',
    '오늘 저녁에 친구들과 축구를 봅니다.',
)


# Never fitted: the unrelated questions `search relevance check` asks (the probes themselves would
# pass at 1 - threshold by construction). Other styles than the probes': scene descriptions,
# headlines, keywords, chat, the jargon of trades.
HELD_OUT = (
    'A man is slicing a loaf of bread on a wooden board.',
    'Two dogs are running across a snowy field.',
    'A woman is riding a horse along the beach.',
    'A boy is playing the drums on a stage.',
    'A cat is sleeping on a windowsill in the sun.',
    'People are dancing in the street at night.',
    'A chef is frying onions in a large pan.',
    'A girl is brushing her hair in front of a mirror.',
    'Three children are jumping on a trampoline.',
    'A man is climbing a rock wall without a rope.',
    'Storm closes airport as snow falls across the north',
    'Local council approves plans for a new swimming pool',
    'Champions win the cup final after a late goal',
    'Shares fall as oil prices rise for a third day',
    'Festival returns to the old harbour this weekend',
    'cheap flights barcelona june',
    'best running shoes flat feet',
    'wooden dining table oak six chairs',
    'knitting pattern baby blanket easy',
    'vintage record player repair',
    'thanks, see you tomorrow!',
    'You got it right.',
    'haha that is so funny, send me the video',
    'I will be ten minutes late, sorry.',
    'Happy birthday, have a wonderful day!',
    'The tenant must give the landlord two months notice in writing before leaving.',
    'The quarterly dividend will be paid to shareholders at the end of the month.',
    'Sodium chloride dissolves readily in water at room temperature.',
    'The patient reported mild knee pain after the long walk.',
    'Tighten the wheel nuts in a star pattern to the torque in the manual.',
    'The bride wore her grandmother\'s lace veil.',
    'Whisk the egg whites until they form stiff peaks.',
    'Our flight was cancelled and we slept at the airport.',
    'The goalkeeper saved a penalty in the last minute.',
    'The violinist tuned her instrument before the recital.',
)

# Probes of a second kind: questions typed into a search box ("what is a ...", "... definition", "how
# does a ... work") about things few collections hold, each with its subject. On a collection about
# one subject (a programming language's reference) they find passages phrased like them, far above
# what everyday sentences find, which share neither subject nor phrasing; their own law then rates
# the hits (relevance.py). One whose best hit names its subject is on topic there and left out.
ASKED = ("what is a {}", "{} definition", "how does a {} work", "how much does a {} cost", "history of the {}",
         "types of {}", "how to choose a {}", "what are the parts of a {}", "is a {} safe for children",
         "how long does a {} last", "where does the word {} come from", "why is my {} making a noise")
SUBJECTS = (
    "accordion", "avocado", "badger", "bagpipe", "bonsai", "canoe", "cathedral", "cello", "chimney", "croissant",
    "dandelion", "dolphin", "ferry", "flamingo", "glacier", "harp", "hedgehog", "igloo", "kayak", "kiln",
    "lighthouse", "llama", "mango", "meadow", "mosaic", "mushroom", "nectarine", "oyster", "pancake", "parrot",
    "quilt", "saddle", "sailboat", "sauna", "scarecrow", "skateboard", "snorkel", "sundial", "telescope",
    "trampoline", "tulip", "violin", "volcano", "walrus", "windmill", "yogurt", "zebra", "tractor",
)


# Never fitted: the search-box questions `search relevance check` asks, in other phrasings, on other subjects.
ASKED_HELD_OUT = ("{} meaning", "what does a {} look like", "how to clean a {}", "how big is a {}",
                  "what is the purpose of a {}", "{} vs {}", "how to draw a {}", "facts about the {}",
                  "where to buy a {}", "how heavy is a {}", "when was the {} invented", "can you eat a {}")
SUBJECTS_HELD_OUT = (
    "anchor", "apricot", "armadillo", "banjo", "barn owl", "beehive", "blueberry", "bulldozer", "camel", "caravan",
    "castle", "cherry", "clarinet", "coconut", "cockatoo", "coral reef", "crocodile", "daffodil", "donkey", "falcon",
    "fig", "gondola", "gorilla", "hammock", "harmonica", "hippo", "jellyfish", "kangaroo", "kite", "lobster",
    "marigold", "moose", "octopus", "ostrich", "papaya", "peacock", "pelican", "penguin", "pineapple", "raccoon",
    "rhubarb", "seahorse", "squirrel", "tambourine", "toucan", "turnip", "walnut", "xylophone",
)


def asked(held_out: bool = False) -> list[tuple[str, str]]:
    """(question, its subject): each subject asked in one of the phrasings, in turn; ``held_out``:
    the check's (ASKED_HELD_OUT, SUBJECTS_HELD_OUT), else the fit's (ASKED, SUBJECTS). "{} vs {}"
    asks a subject against the next one."""
    phrasings, subjects = (ASKED_HELD_OUT, SUBJECTS_HELD_OUT) if held_out else (ASKED, SUBJECTS)
    return [(phrasings[i % len(phrasings)].format(s, subjects[(i + 1) % len(subjects)]), s)
            for i, s in enumerate(subjects)]


def images(n: int = 16) -> list[bytes]:
    """``n`` plain synthetic pictures (colour fields, stripes, blocks; a fixed seed) as JPEG: with the
    golden photos, the probes of photo-to-photo searches."""
    rng, out = np.random.default_rng(0), []
    for i in range(n):
        cells = rng.integers(0, 256, (2 + i % 5, 3 + i % 4, 3), dtype=np.uint8)
        picture = Image.fromarray(cells).resize((224, 160), Image.BICUBIC if i % 2 else Image.NEAREST)
        buf = io.BytesIO()
        picture.save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out
