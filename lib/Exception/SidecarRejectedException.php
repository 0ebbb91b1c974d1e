<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Exception;

/**
 * SidecarRejectedException is a 4xx answer. It carries the stable error code of the
 * protocol (docs/app-sidecar-protocol.md, "Errors").
 */
class SidecarRejectedException extends SidecarException {
	/**
	 * Statuses that say "this request will never be accepted": the sidecar stored nothing
	 * and sending the same body again cannot change that. A 401 is not among them: a wrong
	 * shared secret or a skewed clock is fixed by the admin, after which redelivery works.
	 */
	private const PERMANENT_STATUSES = [400, 413, 422];

	public function __construct(
		private readonly int $httpStatus,
		private readonly string $errorCode,
		string $message,
	) {
		parent::__construct($message);
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
