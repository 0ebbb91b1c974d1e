<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Controller;

use OCA\Istota\Service\ScheduleService;
use OCP\AppFramework\Http\Attribute\ApiRoute;
use OCP\AppFramework\Http\Attribute\NoAdminRequired;
use OCP\AppFramework\Http\DataResponse;
use OCP\IL10N;
use OCP\IRequest;
use OCP\IUserSession;
use Psr\Log\LoggerInterface;

/**
 * ScheduleController serves the personal page's scheduled work: CRON.md jobs, heartbeat
 * checks and briefings of the logged-in user, and actions on their jobs.
 */
class ScheduleController extends OcsBaseController {
	public function __construct(
		IRequest $request,
		IUserSession $userSession,
		IL10N $l10n,
		LoggerInterface $logger,
		private readonly ScheduleService $schedule,
	) {
		parent::__construct($request, $userSession, $l10n, $logger);
	}

	#[NoAdminRequired]
	#[ApiRoute(verb: 'GET', url: '/api/v1/me/schedule')]
	public function schedule(): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->schedule->schedule($uid));
	}

	/** Enables, disables or runs one of the user's jobs now; the job as it is afterwards. */
	#[NoAdminRequired]
	#[ApiRoute(verb: 'POST', url: '/api/v1/me/schedule/jobs/{name}/{action}', requirements: ['action' => 'enable|disable|run'])]
	public function jobAction(string $name, string $action): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->schedule->jobAction($uid, $name, $action));
	}
}
