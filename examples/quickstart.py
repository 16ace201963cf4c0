"""A fastaiagent chain whose checkpoints live in checkpointd: pause for a human, resume."""

import asyncio
import uuid

from fastaiagent import Chain, FunctionTool, Resume, idempotent, interrupt

from checkpointd_client.fastaiagent import SidecarCheckpointer


@idempotent  # fires once per run, however often the node re-executes
def charge_card(account: str, amount: int) -> dict:
    print(f"charging {account}: {amount}")
    return {"charge_id": f"ch-{account}-{amount}"}


def charge_and_approve(account: str, amount: int) -> dict:
    charge = charge_card(account, amount)
    decision = interrupt("manager_approval", {"amount": amount, **charge})
    return {"approved": decision.approved, **charge}


async def main() -> None:
    store = SidecarCheckpointer()  # $CHECKPOINTD_TARGET, default 127.0.0.1:7470
    chain = Chain("checkout", checkpointer=store)
    chain.add_node(
        "approve",
        tool=FunctionTool(name="charge_and_approve", fn=charge_and_approve),
        input_mapping={"account": "{{state.account}}", "amount": "{{state.amount}}"},
        output_key="approval",
    )
    run_id = f"order-{uuid.uuid4().hex[:8]}"

    paused = await chain.aexecute({"account": "acct-42", "amount": 500}, execution_id=run_id)
    print("first run:", paused.status, "waiting for", paused.pending_interrupt["reason"])
    print("pending in the sidecar:", [p.execution_id for p in store.list_pending_interrupts()])

    # Any process, any time later: resume with the human's decision.
    done = await chain.aresume(run_id, resume_value=Resume(approved=True))
    print("resumed:", done.status, done.output)
    store.close()


asyncio.run(main())
