// The .nns language. Newlines are whitespace; ';' may separate statements
// where two would otherwise run together. Comments start with '#' (as in
// Python, whose '//' floor division the language keeps). See docs/language.md.
grammar Nns;

// A declaration keyword used as a name (see ident).
tokens { KEYWORD_NAME }

program : item* EOF ;

item
    : importDecl
    | configDecl
    | opDecl
    | modelDecl
    | planDecl
    | trainDecl
    | weightsDecl
    | statement
    ;

importDecl : 'import' STRING ('as' ID)? ';'? ;

// config tiny { batch = 4  dim = 64 }  — the first preset is the default
configDecl : 'config' name=ID ('extends' base=ID)? '{' configEntry* '}' ;
configEntry : ID '=' expr ';'? ;

// op matmul(a, b) : "m k+, k+ n -> m n"            primitive (kernel in the registry)
// op attn(x, w, h) : "b l^ d^, ... -> b l^ d^" { }  composite (body in .nns)
// A composite's body is the block statement right after the head (no ';'
// between): ast_builder.cpp joins the two items. As an optional part of
// this rule, the body tied with "a primitive, then a top-level block" until
// its closing '}', and the parser looked ahead through the whole body.
opDecl : 'op' name=ID '(' paramList? ')' (':' annotations)? semi=';'? ;
annotations : STRING ('|' STRING)* ;

fnDecl : 'fn' name=ID '(' paramList? ')' block ;
paramList : param (',' param)* ;
param : ident (':' typeName=ID)? ('=' expr)? ;

// A model body is statements: param declarations, submodules (any binding
// whose value is a model instance), methods (fn forward(x) {...}).
modelDecl : 'model' name=ID '(' paramList? ')' block ;

// param w: [h, d] = normal(0.02)      input x: [batch, seq] i32 = tokens(vocab)
// buffer table: [s, d] = rotary(10000.0)   (model state without a gradient)
tensorDecl : kind=('param' | 'input' | 'buffer') name=ident ':' shape=expr dtype=ID? ('=' init=expr)? ';'? ;

planDecl : 'plan' name=ID '(' paramList? ')' block ;
trainDecl : 'train' name=ID? block ;
// weights hf_gpt2 { take("wte", "wte.weight") ... }: how a checkpoint of
// another layout (Hugging Face names) maps onto the model's parameters.
weightsDecl : 'weights' name=ID ('(' paramList? ')')? block ;

block : '{' statement* '}' ;

// `else { ... }` is the else branch's one statement, a block statement (so
// the AST has a block there); a separate `'else' block` alternative tied
// with it until the closing '}' (the parser looked ahead through the whole
// block to choose) and lost every time.

statement
    : 'let' ident '=' expr ';'?                                 # letStmt
    | target=postfix assignOp expr ';'?                         # assignStmt
    | 'return' expr? ';'?                                      # returnStmt
    | 'if' expr block ('else' ifTail=statement)?                # ifStmt
    | 'for' ident 'in' expr block                               # forStmt
    | 'break' ';'?                                             # breakStmt
    | 'continue' ';'?                                          # continueStmt
    | block                                                    # blockStmt
    | tensorDecl                                               # tensorStmt
    | fnDecl                                                   # fnStmt
    | expr ';'?                                                # exprStmt
    ;

assignOp : '=' | '+=' | '-=' | '*=' | '/=' ;

expr
    : lambda                                                   # lambdaExpr
    | cond=orExpr ('if' test=orExpr 'else' other=expr)?        # condExpr
    ;

lambda : 'fn' '(' paramList? ')' (block | '=>' expr) ;

orExpr  : andExpr ('or' andExpr)* ;
andExpr : notExpr ('and' notExpr)* ;
notExpr : 'not' notExpr | comparison ;
comparison : rangeExpr (compOp rangeExpr)? ;
compOp : '==' | '!=' | '<' | '<=' | '>' | '>=' | 'in' ;
rangeExpr : additive ('..' additive)? ;
additive : multiplicative (addOp multiplicative)* ;
addOp : '+' | '-' ;
multiplicative : unary (mulOp unary)* ;
mulOp : '*' | '/' | '//' | '%' | '@' ;
unary : ('-' | '+') unary | power ;
power : postfix ('**' unary)? ;

postfix : primary postfixOp* ;
postfixOp
    : '(' argList? ')'                                         # callOp
    | '[' expr ']'                                             # indexOp
    | '.' ident                                                # memberOp
    ;
argList : arg (',' arg)* ','? ;
arg : (ident '=')? expr ;

primary
    : INT                                                      # intLit
    | FLOAT                                                    # floatLit
    | STRING                                                   # stringLit
    | ('true' | 'false')                                       # boolLit
    | 'none'                                                   # noneLit
    | ident                                                    # nameRef
    | '(' expr ')'                                             # parenExpr
    | '[' expr 'for' ident 'in' expr ('if' orExpr)? ']'         # listComp
    | '[' (expr (',' expr)* ','?)? ']'                         # listLit
    | '{' (dictEntry (',' dictEntry)* ','?)? '}'               # dictLit
    ;
dictEntry : (ID | STRING) ':' expr ;

// Keywords that are also natural variable names ("for op in select(...)")
// stay usable as names wherever a name is expected. The declaration
// keywords (op, model, plan, train, config, weights) are keywords only at
// the top level before a name ('train' also before '{'), where they start
// a declaration; parser.cpp retypes every other one to KEYWORD_NAME before
// parsing. Were the keywords themselves names here, "model M(d) { ... }"
// would also read as the statements "model", "M(d)" and a block: a tie the
// parser settled only at the closing '}'. KEYWORD_NAME, not ID: positions
// that take only an ID (a dtype, a config entry) still refuse them.
ident : ID | KEYWORD_NAME | 'input' | 'param' | 'buffer' ;

ID     : [a-zA-Z_] [a-zA-Z_0-9]* ;
INT    : [0-9]+ ;
FLOAT  : [0-9]+ '.' [0-9]+ EXP? | [0-9]+ EXP ;
fragment EXP : [eE] [+-]? [0-9]+ ;
STRING : '"' (~["\\\r\n] | '\\' .)* '"' ;

LINE_COMMENT  : '#' ~[\r\n]* -> channel(HIDDEN) ;
WS : [ \t\r\n]+ -> channel(HIDDEN) ;
// Anything else is a lexical error reported with its position.
BAD_CHAR : . ;
