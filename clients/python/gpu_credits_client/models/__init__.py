"""Contains all the data models used in inputs/outputs"""

from .account_page import AccountPage
from .account_settings_request import AccountSettingsRequest
from .account_settings_response import AccountSettingsResponse
from .allocation_item import AllocationItem
from .balance_operation import BalanceOperation
from .balance_response import BalanceResponse
from .batch_request import BatchRequest
from .batch_response import BatchResponse
from .batch_result import BatchResult
from .batch_result_op import BatchResultOp
from .consume_event import ConsumeEvent
from .consume_operation import ConsumeOperation
from .consume_request import ConsumeRequest
from .consume_response import ConsumeResponse
from .consumption_entry import ConsumptionEntry
from .event_duplicate import EventDuplicate
from .event_result_line import EventResultLine
from .expiration_entry import ExpirationEntry
from .forecast_grant import ForecastGrant
from .forecast_response import ForecastResponse
from .grant_detail_response import GrantDetailResponse
from .grant_detail_response_metadata_type_0 import GrantDetailResponseMetadataType0
from .grant_entry import GrantEntry
from .grant_entry_metadata_type_0 import GrantEntryMetadataType0
from .grant_event import GrantEvent
from .grant_event_metadata_type_0 import GrantEventMetadataType0
from .grant_operation import GrantOperation
from .grant_operation_metadata_type_0 import GrantOperationMetadataType0
from .grant_request import GrantRequest
from .grant_request_metadata_type_0 import GrantRequestMetadataType0
from .grant_response import GrantResponse
from .grant_response_metadata_type_0 import GrantResponseMetadataType0
from .health import Health
from .ledger_page import LedgerPage
from .live_grant_item import LiveGrantItem
from .live_grant_item_metadata_type_0 import LiveGrantItemMetadataType0
from .live_grants_response import LiveGrantsResponse
from .problem import Problem
from .problem_operation_problem_type_0 import ProblemOperationProblemType0
from .validation_issue import ValidationIssue
from .version_info import VersionInfo
from .version_info_storage import VersionInfoStorage
from .void_entry import VoidEntry
from .void_event import VoidEvent
from .void_operation import VoidOperation
from .void_request import VoidRequest
from .void_response import VoidResponse

__all__ = (
    "AccountPage",
    "AccountSettingsRequest",
    "AccountSettingsResponse",
    "AllocationItem",
    "BalanceOperation",
    "BalanceResponse",
    "BatchRequest",
    "BatchResponse",
    "BatchResult",
    "BatchResultOp",
    "ConsumeEvent",
    "ConsumeOperation",
    "ConsumeRequest",
    "ConsumeResponse",
    "ConsumptionEntry",
    "EventDuplicate",
    "EventResultLine",
    "ExpirationEntry",
    "ForecastGrant",
    "ForecastResponse",
    "GrantDetailResponse",
    "GrantDetailResponseMetadataType0",
    "GrantEntry",
    "GrantEntryMetadataType0",
    "GrantEvent",
    "GrantEventMetadataType0",
    "GrantOperation",
    "GrantOperationMetadataType0",
    "GrantRequest",
    "GrantRequestMetadataType0",
    "GrantResponse",
    "GrantResponseMetadataType0",
    "Health",
    "LedgerPage",
    "LiveGrantItem",
    "LiveGrantItemMetadataType0",
    "LiveGrantsResponse",
    "Problem",
    "ProblemOperationProblemType0",
    "ValidationIssue",
    "VersionInfo",
    "VersionInfoStorage",
    "VoidEntry",
    "VoidEvent",
    "VoidOperation",
    "VoidRequest",
    "VoidResponse",
)
