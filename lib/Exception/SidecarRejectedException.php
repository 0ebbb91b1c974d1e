<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Exception;

/**
 * SidecarRejectedException is a 4xx answer. It carries the stable error code of the
 * protocol (docs/app-sidecar-protocol.md, "Errors") and, for the settings pages
 * (docs/user-api.md), the sidecar's own message (safe to show: it never holds a secret),
 * the field-level problems of a 422 and the current ETag of a 409 on USER.md.
 */
class SidecarRejectedException extends SidecarException {
	/**
	 * Statuses that say "this request will never be accepted": the sidecar stored nothing
	 * and sending the same body again cannot change that. A 401 is not among them: a wrong
	 * shared secret or a skewed clock is fixed by the admin, after which redelivery works.
	 */
	private const PERMANENT_STATUSES = [400, 413, 422];

	/**
	 * @param array<string, string> $fields field name => problem (422 invalid_settings)
	 */
	public function __construct(
		private readonly int $httpStatus,
		private readonly string $errorCode,
		string $message,
		private readonly string $sidecarMessage = '',
		private readonly array $fields = [],
		private readonly string $currentEtag = '',
	) {
		parent::__construct($message);
	}

	/** error.message of the answer as the sidecar wrote it; "" when it had none. */
	public function getSidecarMessage(): string {
		return $this->sidecarMessage;
	}

	/** @return array<string, string> error.fields of a 422: field name => problem */
	public function getFields(): array {
		return $this->fields;
	}

	/** error.current_etag of a 409 conflict on USER.md; "" otherwise. */
	public function getCurrentEtag(): string {
		return $this->currentEtag;
	}

	public function getHttpStatus(): int {
		return $this->httpStatus;
	}

	/** The protocol's stable error code, e.g. "bad_signature"; "" when the answer had none. */
	public function getErrorCode(): string {
		return $this->errorCode;
	}

	/** Whether retrying the very same request is pointless. */
	public function isPermanent(): bool {
		return in_array($this->httpStatus, self::PERMANENT_STATUSES, true);
	}
}
