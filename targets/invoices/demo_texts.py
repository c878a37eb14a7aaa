"""The demo catalog's descriptions in the three styles the source article priced (its section 06).

``engineered`` is the article's sweet spot: one sentence of what the tool does,
one of the rules the model must not break (idempotency key reuse, handle
expiry), and arguments that state their constraints. ``bloated`` is the
boilerplate generated docs tend to be: the same facts, restated, wrapped in
preamble, parameter lists the schema already carries, and reassurance.
``terse`` keeps a few words per tool and drops the rules, the one channel
that reaches the model's reasoning. Only the words change between styles: the
tools, their schemas and their behaviour are the same.

``{ttl}``, ``{quota}`` and ``{window}`` are replaced by the handle lifetime and
the send quota the server runs with, so a description never promises what the
server does not keep.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Texts:
    """One tool's words: its description, its arguments', and its result's fields'."""

    description: str
    args: dict[str, str] = field(default_factory=dict)
    output: dict[str, str] = field(default_factory=dict)


KEY_RULE = "Unique per intended {what}. Reuse ONLY when retrying the same intent."

ENGINEERED = {
    "create_invoice": Texts(
        "Creates an invoice. Pass an idempotency_key that is unique per business intent; a retry with "
        "the same key returns the first invoice instead of creating a new one.",
        {
            "customer_id": "The customer to bill, as your customer records name them.",
            "amount_cents": "Amount in cents (1250 is 12.50); a positive whole number, else invalid_amount.",
            "memo": "Free text printed on the invoice, as the customer will read it.",
            "idempotency_key": KEY_RULE.format(what="invoice"),
        },
    ),
    "get_invoice": Texts(
        "Returns one invoice with its status: open, sent or void. An unknown invoice_id answers "
        "invoice_not_found; search_invoices finds invoices by customer.",
        {"invoice_id": "An invoice_id as create_invoice or search_invoices returned it."},
    ),
    "search_invoices": Texts(
        "Lists invoices, oldest first, one page at a time. Continue with search_next while next_page is "
        "not null; a next_page expires in ~{ttl}.",
        {
            "customer_id": "Only this customer's invoices (all customers when omitted).",
            "status": "Only invoices in this status: open, sent or void.",
            "limit": "Invoices per page, 1 to 20.",
        },
        {
            "results": "At most limit invoices.",
            "next_page": "Opaque cursor. Pass it to search_next to continue. Expires in ~{ttl}.",
        },
    ),
    "search_next": Texts(
        "Returns the next page of a search_invoices search. An expired next_page answers handle_expired: "
        "run search_invoices again, and never build a next_page yourself.",
        {"next_page": "The next_page of the previous page, exactly as returned."},
        {
            "results": "At most limit invoices.",
            "next_page": "Opaque cursor. Pass it to search_next to continue. Expires in ~{ttl}.",
        },
    ),
    "send_invoice": Texts(
        "Emails an invoice to its customer, at most {quota} sends per {window}. Reuse idempotency_key only "
        "to retry the same send; on quota_exceeded, wait retry_after_ms and retry with the same key.",
        {
            "invoice_id": "The invoice to send; a void one answers invoice_void.",
            "idempotency_key": KEY_RULE.format(what="send"),
        },
    ),
    "void_invoice": Texts(
        "Voids an invoice so that it can no longer be sent or paid. It cannot be undone; reuse "
        "idempotency_key only to retry the same void.",
        {
            "invoice_id": "The invoice to void.",
            "reason": "Why, as the customer will read it.",
            "idempotency_key": KEY_RULE.format(what="void"),
        },
    ),
}

TERSE = {
    "create_invoice": Texts("Create invoice."),
    "get_invoice": Texts("Get invoice."),
    "search_invoices": Texts("Search invoices."),
    "search_next": Texts("Next page."),
    "send_invoice": Texts("Send invoice."),
    "void_invoice": Texts("Void invoice."),
}

BLOATED = {
    "create_invoice": Texts(
        "This tool allows you to create a new invoice in the invoicing system for a given customer. "
        "It is one of the most important tools available in this server and should be used whenever the "
        "user wants to bill a customer for goods or services. When you call this tool, a new invoice "
        "record will be created in the database with the customer ID, the amount in cents and the memo "
        "that you provide, and the newly created invoice will be returned to you, including its unique "
        "invoice ID and the timestamp at which it was created. Please make sure that you provide all of "
        "the required parameters and that their values are valid, otherwise the operation may fail. "
        "IMPORTANT: This tool supports idempotency. You should pass an idempotency_key parameter that is "
        "unique for each business intent. If a request is retried with the same idempotency_key, the "
        "server will return the original invoice instead of creating a duplicate invoice. This is very "
        "useful in situations where network errors occur. Note that the amount must always be specified "
        "in cents and not in dollars or any other currency unit. The returned invoice is provided as a "
        "JSON object with the fields invoice_id, customer_id, amount_cents, memo and created_at.",
        {
            "customer_id": "The unique identifier of the customer for whom the invoice should be created. "
            "This should be a valid customer ID string that identifies an existing customer in your system.",
            "amount_cents": "The total amount of the invoice, expressed in cents (for example, 1250 means "
            "12.50). This value must be a positive integer greater than zero. Negative or zero amounts are "
            "not allowed and will result in an error.",
            "memo": "An optional free-text memo or note that will be attached to the invoice and shown on "
            "it. You can use this field to describe what the invoice is for.",
            "idempotency_key": "A unique key that identifies this specific request for idempotency "
            "purposes. You should generate a new unique key for every new invoice that you want to create. "
            "If you need to retry the exact same request, for example after a timeout or a network error, "
            "you should reuse the same key so that no duplicate invoice is created.",
        },
    ),
    "get_invoice": Texts(
        "This tool allows you to retrieve the full details of a single existing invoice from the "
        "invoicing system by providing its unique invoice ID. It returns all of the information that is "
        "stored about the invoice, including the customer ID, the amount in cents, the memo, the date and "
        "time of creation, and the current status of the invoice, which can be open, sent or void. Use "
        "this tool whenever you need to look up an invoice, check whether it has already been sent to the "
        "customer, or verify that it has not been voided. Please note that this is a read-only operation "
        "and it will never modify the invoice in any way, so it is always safe to call it as many times "
        "as you need. If no invoice with the given ID exists, the tool will return an error with the code "
        "invoice_not_found; in that case you may want to use the search_invoices tool to find the "
        "invoice you are looking for. The returned invoice is provided as a JSON object with the fields "
        "invoice_id, customer_id, amount_cents, memo, created_at and status.",
        {
            "invoice_id": "The unique identifier of the invoice that you want to retrieve. This is the "
            "invoice ID that was returned by the create_invoice tool or by the search_invoices tool, and it "
            "usually starts with the prefix inv_ followed by a number. The value is case-sensitive.",
        },
    ),
    "search_invoices": Texts(
        "This tool allows you to search for invoices in the invoicing system and returns a list of "
        "matching invoices. You can optionally filter the results by customer ID and by status (open, "
        "sent or void). If you do not provide any filters, all invoices will be returned. The results "
        "are sorted by creation date, with the oldest invoices first, and they are returned in pages in "
        "order to keep the responses small. Each page contains at most the number of invoices given by "
        "the limit parameter. If there are more results available than fit in one page, the response "
        "will include a next_page value, which you can pass to the search_next tool in order to retrieve "
        "the next page of results. Please be aware that the next_page value is only valid for a limited "
        "period of time (about {ttl}) and will expire after that, so you should retrieve the following "
        "pages promptly. This is a read-only operation that does not change any data.",
        {
            "customer_id": "An optional customer ID that can be used to filter the invoices. If you "
            "provide this parameter, only invoices that belong to the specified customer will be returned. "
            "If you leave it empty, invoices of all customers will be included in the results.",
            "status": "An optional status that can be used to filter the invoices. The allowed values are "
            "open (the invoice has been created but not sent yet), sent (the invoice has been emailed to "
            "the customer) and void (the invoice has been cancelled). If not provided, invoices with any "
            "status will be returned.",
            "limit": "The maximum number of invoices that should be returned in a single page of results. "
            "This must be a number between 1 and 20; larger values are not allowed. If you do not specify "
            "a limit, a default value of 20 will be used.",
        },
        {
            "results": "The list of invoices that match the search criteria for the current page, sorted "
            "from the oldest to the newest invoice.",
            "next_page": "A cursor value that can be used to retrieve the next page of results by passing it "
            "to the search_next tool. If there are no more results, this value will be null. Please note "
            "that the cursor is opaque and expires after about {ttl}.",
        },
    ),
    "search_next": Texts(
        "This tool allows you to retrieve the next page of results of a search that was previously "
        "started with the search_invoices tool. In order to use it, you need to pass the next_page value "
        "that was returned by the previous call to search_invoices or search_next. The response has exactly "
        "the same format as the response of search_invoices, including a new next_page value if even more "
        "results are available. You can keep calling this tool until the next_page value is null, which "
        "means that there are no more results to retrieve. Please note that next_page values expire after "
        "about {ttl}. If you pass an expired value, the tool will return an error with the code "
        "handle_expired, and you will need to start a new search by calling search_invoices again. You "
        "should never try to construct or modify a next_page value yourself. This is a read-only "
        "operation that does not change any data.",
        {
            "next_page": "The next_page cursor value that was returned by the previous call to the "
            "search_invoices tool or to the search_next tool. You must pass this value exactly as it was "
            "returned to you, without changing it in any way.",
        },
        {
            "results": "The list of invoices that match the search criteria for the current page, sorted "
            "from the oldest to the newest invoice.",
            "next_page": "A cursor value that can be used to retrieve the next page of results by passing it "
            "to the search_next tool. If there are no more results, this value will be null. Please note "
            "that the cursor is opaque and expires after about {ttl}.",
        },
    ),
    "send_invoice": Texts(
        "This tool allows you to send an existing invoice to the customer by email. When you call this "
        "tool, the invoice will be emailed to the customer it belongs to and its status will change to "
        "sent. You can use this tool after creating an invoice with the create_invoice tool, or to send "
        "an invoice again as a reminder. Please note that invoices that have been voided cannot be sent, "
        "and trying to do so will result in an error with the code invoice_void. Also note that there is "
        "a limit on how many invoices can be sent: at most {quota} invoices per {window}. If this limit "
        "is reached, the tool will return an error with the code quota_exceeded, together with a "
        "retry_after_ms value that tells you how many milliseconds you should wait before trying again. "
        "IMPORTANT: This tool supports idempotency, so please always pass an idempotency_key that is "
        "unique for each send, and reuse it only when you retry the same send. The response contains the "
        "invoice ID, the new status and the date and time at which the invoice was sent.",
        {
            "invoice_id": "The unique identifier of the invoice that you want to send to the customer. This "
            "is the invoice ID that was returned by the create_invoice tool or by the search_invoices tool.",
            "idempotency_key": "A unique key that identifies this specific request for idempotency "
            "purposes. You should generate a new unique key for every new send that you want to perform. "
            "If you need to retry the exact same request, for example after a timeout or a network error, "
            "you should reuse the same key so that the invoice is not sent twice.",
        },
    ),
    "void_invoice": Texts(
        "This tool allows you to void (cancel) an existing invoice in the invoicing system. Once an "
        "invoice has been voided, its status will change to void, and it can no longer be sent to the "
        "customer or paid. Please be very careful when using this tool, because voiding an invoice is a "
        "permanent action that cannot be undone. You should only void an invoice if the user has clearly "
        "asked you to do so, for example because the invoice was created by mistake or contains wrong "
        "information. You also need to provide a reason for voiding the invoice, which will be recorded "
        "and may be shown to the customer. If the invoice has already been voided, the tool will return "
        "an error with the code invoice_void. IMPORTANT: This tool supports idempotency, so please always "
        "pass an idempotency_key that is unique for each void, and reuse it only when you retry. The "
        "response contains the invoice ID, the new status, the reason and the date and time at which the "
        "invoice was voided. If you are not sure whether the user wants to void the invoice, ask first.",
        {
            "invoice_id": "The unique identifier of the invoice that you want to void. This is the invoice "
            "ID that was returned by the create_invoice tool or by the search_invoices tool.",
            "reason": "A short explanation of why the invoice is being voided. This text will be recorded "
            "together with the invoice and may be shown to the customer, so please write it clearly.",
            "idempotency_key": "A unique key that identifies this specific request for idempotency "
            "purposes. You should generate a new unique key for every new void that you want to perform. "
            "If you need to retry the exact same request, for example after a timeout or a network error, "
            "you should reuse the same key.",
        },
    ),
}

STYLES: dict[str, dict[str, Texts]] = {"bloated": BLOATED, "engineered": ENGINEERED, "terse": TERSE}


def duration(ms: int) -> str:
    """A handle lifetime as the descriptions say it: ``15 minutes``, ``2 seconds``, ``500 ms``."""
    for unit, size in (("minute", 60_000), ("second", 1000)):
        if ms % size == 0:
            n = ms // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{ms} ms"


def styled(style: str, *, handle_ttl_ms: int, send_quota: int, quota_window_ms: int) -> dict[str, Texts]:
    """The style's texts with the server's handle lifetime and send quota filled in."""
    window = duration(quota_window_ms).removeprefix("1 ")

    def fill(text: str) -> str:
        return (
            text.replace("{ttl}", duration(handle_ttl_ms))
            .replace("{quota}", str(send_quota))
            .replace("{window}", window)
        )

    return {
        tool: Texts(
            fill(t.description),
            {k: fill(v) for k, v in t.args.items()},
            {k: fill(v) for k, v in t.output.items()},
        )
        for tool, t in STYLES[style].items()
    }
